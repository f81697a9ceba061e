"""Finance exports: the reconciliation report and the ledger, as CSV and XLSX.

People open these in a spreadsheet, so money is in major units with its currency beside it,
a currency column per amount (`charge` 0.90, `charge_currency` USD): exact decimals from the
integer minor units, never floats; XLSX cells are numbers with the currency's decimals.

Both stream, in time linear in the rows: CSV as chunks of lines (a StreamingHttpResponse
body), XLSX through openpyxl's write-only mode into a file (rows go to disk as they are
written; the normal mode re-reads the sheet on every appended row and grew quadratically).
"""

from __future__ import annotations

import csv
import io
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from decimal import Decimal
from typing import IO, Any

from django.db.models import QuerySet

from sampling.spreadsheets import inert, write_only_row

from .models import Posting
from .reconciliation import ReconReport, ReconRow
from .services.errors import major_decimal

RECON_COLUMNS = [
    "platform", "upstream_id", "run_id", "sample_id", "status",
    "charge", "charge_currency", "recorded_cost", "recorded_cost_currency",
    "statement_cost", "statement_cost_currency", "difference", "difference_currency",
]  # fmt: skip

LEDGER_COLUMNS = [
    "entry_id", "created_at", "idempotency_key", "kind", "tenant", "run_id", "sample_id",
    "platform", "upstream_id", "account", "account_kind", "amount", "currency", "memo",
]  # fmt: skip

CSV_CHUNK_ROWS = 500  # lines per chunk of a streamed CSV
LEDGER_FETCH_ROWS = 2000  # postings fetched per database round trip


def _major(amount: int | None, currency: str) -> Decimal | None:
    """An amount in major units, or None where there is none (or no single currency)."""
    if amount is None or not currency or "/" in currency:
        return None
    return major_decimal(amount, currency)


def _recon_row(r: ReconRow) -> list[Any]:
    same = r.cost_currency if "/" not in r.cost_currency else ""
    return [
        r.platform, r.upstream_id, r.run_id or "", r.sample_id or "", r.status,
        _major(r.charge, r.charge_currency), r.charge_currency if r.charge is not None else "",
        _major(r.recorded_cost, r.recorded_currency), r.recorded_currency,
        _major(r.statement_cost, r.statement_currency), r.statement_currency,
        _major(r.difference, same), same,
    ]  # fmt: skip


def _recon_rows(report: ReconReport) -> Iterator[list[Any]]:
    return (_recon_row(r) for r in report.rows)


def _ledger_rows(postings: QuerySet[Posting]) -> Iterator[list[Any]]:
    rows = postings.select_related("entry", "entry__tenant", "account").order_by("entry", "id")
    for p in rows.iterator(chunk_size=LEDGER_FETCH_ROWS):
        e, currency = p.entry, p.account.currency
        yield [
            e.pk, e.created_at.isoformat(), e.idempotency_key, e.kind,
            e.tenant.slug if e.tenant else "", str(e.run_id or ""), e.sample_id or "",
            e.platform, e.upstream_id, p.account.code, p.account.kind,
            major_decimal(p.amount, currency), currency, e.memo,
        ]  # fmt: skip


class _Line:
    """A file that hands back what is written to it (csv.writer's output, one row at a time)."""

    def write(self, value: str) -> str:
        return value


def csv_chunks(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> Iterator[str]:
    """The CSV as chunks of lines, every cell inert (sampling/spreadsheets.py)."""
    writer = csv.writer(_Line())
    chunk = [writer.writerow([inert(v) for v in header])]
    for row in rows:
        chunk.append(writer.writerow([inert(v) for v in row]))
        if len(chunk) >= CSV_CHUNK_ROWS:
            yield "".join(chunk)
            chunk = []
    if chunk:
        yield "".join(chunk)


def _write_xlsx(
    out: IO[bytes], sheets: Sequence[tuple[str, Sequence[str], Iterable[Sequence[Any]]]]
) -> None:
    from openpyxl import Workbook
    from openpyxl.styles import Font

    workbook = Workbook(write_only=True)
    bold = Font(bold=True)
    for title, header, rows in sheets:
        sheet = workbook.create_sheet(title=title[:31])
        sheet.freeze_panes = "A2"
        for column, name in enumerate(header):
            letter = _column_letter(column)
            sheet.column_dimensions[letter].width = max(12, len(name) + 2)
        write_only_row(sheet, header, font=bold)
        for row in rows:
            write_only_row(sheet, row)
    workbook.save(out)


def _column_letter(index: int) -> str:
    from openpyxl.utils import get_column_letter

    return str(get_column_letter(index + 1))


def xlsx_file(sheets: Sequence[tuple[str, Sequence[str], Iterable[Sequence[Any]]]]) -> IO[bytes]:
    """The workbook in a temporary file, rewound (a FileResponse streams it and closes it)."""
    out = tempfile.TemporaryFile()  # noqa: SIM115 -- closed by the response that streams it
    _write_xlsx(out, sheets)
    out.seek(0)
    return out


def _recon_sheets(report: ReconReport) -> list[tuple[str, Sequence[str], Iterable[Any]]]:
    summary = [[status, count] for status, count in sorted(report.totals.items())]
    scope = [
        ["run", report.run_id or ""],
        ["start", report.start.isoformat() if report.start else ""],
        ["end", report.end.isoformat() if report.end else ""],
        ["platform", report.platform or ""],
    ]
    return [
        ("reconciliation", RECON_COLUMNS, _recon_rows(report)),
        ("summary", ["status", "tasks"], summary),
        ("scope", ["field", "value"], scope),
    ]


def _postings(postings: QuerySet[Posting] | None) -> QuerySet[Posting]:
    return postings if postings is not None else Posting.objects.all()


def reconciliation_csv_chunks(report: ReconReport) -> Iterator[str]:
    return csv_chunks(RECON_COLUMNS, _recon_rows(report))


def reconciliation_csv(report: ReconReport) -> str:
    return "".join(reconciliation_csv_chunks(report))


def reconciliation_xlsx_file(report: ReconReport) -> IO[bytes]:
    return xlsx_file(_recon_sheets(report))


def reconciliation_xlsx(report: ReconReport) -> bytes:
    out = io.BytesIO()
    _write_xlsx(out, _recon_sheets(report))
    return out.getvalue()


def ledger_csv_chunks(postings: QuerySet[Posting] | None = None) -> Iterator[str]:
    return csv_chunks(LEDGER_COLUMNS, _ledger_rows(_postings(postings)))


def ledger_csv(postings: QuerySet[Posting] | None = None) -> str:
    return "".join(ledger_csv_chunks(postings))


def ledger_xlsx_file(postings: QuerySet[Posting] | None = None) -> IO[bytes]:
    return xlsx_file([("ledger", LEDGER_COLUMNS, _ledger_rows(_postings(postings)))])


def ledger_xlsx(postings: QuerySet[Posting] | None = None) -> bytes:
    out = io.BytesIO()
    _write_xlsx(out, [("ledger", LEDGER_COLUMNS, _ledger_rows(_postings(postings)))])
    return out.getvalue()
