"""Finance exports: the reconciliation report and the ledger, as CSV and XLSX.

Amounts are exported as integers in minor units, exactly as booked (no float conversion).
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from typing import Any

from django.db.models import QuerySet

from sampling.spreadsheets import append_row, csv_text

from .models import Posting
from .reconciliation import COLUMNS, ReconReport

LEDGER_COLUMNS = [
    "entry_id", "created_at", "idempotency_key", "kind", "tenant", "run_id", "sample_id",
    "platform", "upstream_id", "account", "account_kind", "currency", "amount", "memo",
]  # fmt: skip


def _recon_rows(report: ReconReport) -> list[list[Any]]:
    return [[r.as_dict()[c] for c in COLUMNS] for r in report.rows]


def _ledger_rows(postings: QuerySet[Posting]) -> Iterable[list[Any]]:
    for p in postings.select_related("entry", "entry__tenant", "account").order_by("entry", "id"):
        e = p.entry
        yield [
            e.pk, e.created_at.isoformat(), e.idempotency_key, e.kind,
            e.tenant.slug if e.tenant else "", str(e.run_id or ""), e.sample_id or "",
            e.platform, e.upstream_id, p.account.code, p.account.kind, p.account.currency,
            p.amount, e.memo,
        ]  # fmt: skip


def _xlsx(sheets: list[tuple[str, Sequence[str], Iterable[Sequence[Any]]]]) -> bytes:
    from openpyxl import Workbook

    workbook = Workbook()
    workbook.remove(workbook.active)
    for title, header, rows in sheets:
        sheet = workbook.create_sheet(title=title[:31])
        append_row(sheet, header)
        for row in rows:
            append_row(sheet, row)
        sheet.freeze_panes = "A2"
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def reconciliation_csv(report: ReconReport) -> str:
    return csv_text(COLUMNS, _recon_rows(report))


def reconciliation_xlsx(report: ReconReport) -> bytes:
    summary = [[status, count] for status, count in sorted(report.totals.items())]
    scope = [
        ["run", report.run_id or ""],
        ["start", report.start.isoformat() if report.start else ""],
        ["end", report.end.isoformat() if report.end else ""],
        ["platform", report.platform or ""],
    ]
    return _xlsx(
        [
            ("reconciliation", COLUMNS, _recon_rows(report)),
            ("summary", ["status", "tasks"], summary),
            ("scope", ["field", "value"], scope),
        ]
    )


def ledger_csv(postings: QuerySet[Posting] | None = None) -> str:
    return csv_text(
        LEDGER_COLUMNS, _ledger_rows(postings if postings is not None else Posting.objects.all())
    )


def ledger_xlsx(postings: QuerySet[Posting] | None = None) -> bytes:
    qs = postings if postings is not None else Posting.objects.all()
    return _xlsx([("ledger", LEDGER_COLUMNS, _ledger_rows(qs))])
