"""Reconciliation: our charges and upstream costs, joined by upstream task id.

Three sources per (platform, upstream task id):
* our charge — what the tenant was charged for the sample that task answered;
* recorded cost — upstream-cost and adjustment entries in our ledger (from the connector);
* statement cost — the provider's imported statement (CSV).

Status per task: `matched` (recorded == statement), `amount_mismatch`, `missing_upstream` (we
have it, the statement does not), `missing_ours` (the statement has it, we recorded nothing).
Differences are settled by explicit adjustment entries (`settle_differences`), never edits;
after an adjustment the task reports `matched`.
"""

from __future__ import annotations

import csv
import hashlib
import io
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db import IntegrityError, transaction
from django.db.models import Q, Sum
from django.utils.dateparse import parse_datetime

from sampling import inputs
from sampling.models import Attempt, Run, Sample
from sampling.steps import REASKED_UNKNOWN

from .models import (
    AccountKind,
    EntryKind,
    JournalEntry,
    Posting,
    SampleSettlement,
    UpstreamStatement,
    UpstreamStatementLine,
)
from .services import adjust_upstream_cost

MATCHED = "matched"
AMOUNT_MISMATCH = "amount_mismatch"
MISSING_UPSTREAM = "missing_upstream"
MISSING_OURS = "missing_ours"
COST_UNKNOWN = "cost_unknown"
STATUSES = (MATCHED, AMOUNT_MISMATCH, MISSING_UPSTREAM, MISSING_OURS, COST_UNKNOWN)

REQUIRED_COLUMNS = ("upstream_id", "amount", "currency", "occurred_at")
MAX_STATEMENT_BYTES = 16 * 1024 * 1024


# --- statement import -----------------------------------------------------------------------


class StatementError(ValueError):
    """The statement cannot be imported; `problems` names every bad row."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass
class ImportResult:
    statement: UpstreamStatement
    created: bool
    imported: int
    already_known: int


def _checked(rule: Any, value: Any, field: str, problems: list[str], **options: Any) -> Any:
    try:
        return rule(value, field, **options)
    except inputs.InputError as error:
        problems.append(str(error))
        return None


def _parse_row(row_no: int, row: dict[str, str | None]) -> tuple[dict[str, Any], list[str]]:
    problems: list[str] = []
    cells = {name: (row.get(name) or "").strip() for name in REQUIRED_COLUMNS}
    where = f"row {row_no}"
    upstream_id = _checked(
        inputs.identifier, cells["upstream_id"], f"{where}: upstream_id", problems
    )
    amount = _checked(inputs.amount, cells["amount"], f"{where}: amount", problems, minimum=0)
    currency = _checked(inputs.currency, cells["currency"].upper(), f"{where}: currency", problems)
    raw_time = _checked(inputs.text, cells["occurred_at"], f"{where}: occurred_at", problems)
    occurred_at: datetime | None = None
    try:
        occurred_at = parse_datetime(raw_time or "")
    except ValueError:
        occurred_at = None
    if raw_time is None:
        pass  # already named
    elif occurred_at is None:
        problems.append(f"{where}: occurred_at {raw_time[:40]!r} is not an ISO 8601 date-time")
    elif occurred_at.tzinfo is None:
        problems.append(f"{where}: occurred_at {raw_time[:40]!r} has no time zone")
    if None in row:  # more cells than header columns
        problems.append(f"{where}: {len(row[None] or [])} cell(s) beyond the header")  # type: ignore[index]
    return {
        "upstream_id": upstream_id or "",
        "amount": amount or 0,
        "currency": currency or "",
        "occurred_at": occurred_at,
    }, problems


def _data_rows(text: str) -> Iterator[tuple[int, dict[str, str | None]]]:
    """Rows after the header, numbered as in the file; blank lines skipped. A malformed file
    (a field over the csv module's limit, a broken quote) is a StatementError."""
    reader = csv.DictReader(io.StringIO(text))
    try:
        header = [h.strip() for h in (reader.fieldnames or [])]
        missing = [c for c in REQUIRED_COLUMNS if c not in header]
        if missing:
            raise StatementError(
                [f"header: missing column(s) {', '.join(missing)} (found {header[:10]})"]
            )
        reader.fieldnames = header
        for row_no, row in enumerate(reader, start=2):  # row 1 is the header
            if any((v or "").strip() for k, v in row.items() if k is not None):
                yield row_no, row
    except csv.Error as error:
        # line_num counts the lines read before the record that failed.
        line = reader.line_num + 1
        raise StatementError([f"row {line}: not readable as CSV ({error})"]) from None


def import_statement(*, provider: str, filename: str, content: bytes) -> ImportResult:
    """Import a provider's CSV statement: `upstream_id,amount,currency,occurred_at` (amount in
    minor units, occurred_at ISO 8601 with zone). All or nothing: any malformed row refuses the
    whole file, naming every bad row. Importing the same file again changes nothing; a task
    already known from another statement with the same amount is skipped, with a different
    amount it is an error."""
    if len(content) > MAX_STATEMENT_BYTES:
        raise StatementError(
            [f"file is {len(content)} bytes, over the {MAX_STATEMENT_BYTES}-byte limit"]
        )
    try:
        provider = inputs.slug(provider, "provider", max_length=32)
    except inputs.InputError as error:
        raise StatementError([str(error)]) from None
    digest = hashlib.sha256(content).hexdigest()
    known = UpstreamStatement.objects.filter(sha256=digest).first()
    if known is not None:
        return ImportResult(statement=known, created=False, imported=0, already_known=known.rows)
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise StatementError([f"file is not UTF-8: {error}"]) from None
    problems: list[str] = []
    rows: list[tuple[int, dict[str, Any]]] = []
    seen: dict[str, int] = {}
    for row_no, row in _data_rows(text):
        parsed, row_problems = _parse_row(row_no, row)
        problems.extend(row_problems)
        uid = parsed["upstream_id"]
        if uid and uid in seen:
            problems.append(f"row {row_no}: upstream_id {uid!r} repeats row {seen[uid]}")
        seen.setdefault(uid, row_no)
        rows.append((row_no, parsed))
    existing = {
        line.upstream_id: line
        for line in UpstreamStatementLine.objects.filter(
            provider=provider, upstream_id__in=[r["upstream_id"] for _, r in rows]
        )
    }
    fresh: list[tuple[int, dict[str, Any]]] = []
    for row_no, parsed in rows:
        old = existing.get(parsed["upstream_id"])
        if old is None:
            fresh.append((row_no, parsed))
        elif (old.amount, old.currency) != (parsed["amount"], parsed["currency"]):
            problems.append(
                f"row {row_no}: upstream_id {parsed['upstream_id']!r} was imported before "
                f"with {old.amount} {old.currency} (statement #{old.statement_id}, row "
                f"{old.row_no}); now {parsed['amount']} {parsed['currency']}"
            )
    if not rows and not problems:
        problems.append("file has no data rows")
    if problems:
        raise StatementError(problems)
    try:
        with transaction.atomic():
            statement = UpstreamStatement.objects.create(
                provider=provider, filename=filename[:255], sha256=digest, rows=len(rows)
            )
            UpstreamStatementLine.objects.bulk_create(
                UpstreamStatementLine(statement=statement, row_no=row_no, provider=provider, **r)
                for row_no, r in fresh
            )
    except IntegrityError:  # imported concurrently
        statement = UpstreamStatement.objects.get(sha256=digest)
        return ImportResult(statement=statement, created=False, imported=0, already_known=len(rows))
    return ImportResult(
        statement=statement,
        created=True,
        imported=len(fresh),
        already_known=len(rows) - len(fresh),
    )


# --- the report -----------------------------------------------------------------------------


@dataclass
class ReconRow:
    platform: str
    upstream_id: str
    run_id: str | None = None
    sample_id: int | None = None
    charge: int | None = None
    charge_currency: str = ""
    recorded_cost: int | None = None
    statement_cost: int | None = None
    cost_currency: str = ""
    status: str = ""

    @property
    def difference(self) -> int:
        """statement - recorded (what an adjustment would book)."""
        return (self.statement_cost or 0) - (self.recorded_cost or 0)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["difference"] = self.difference
        return data


@dataclass
class ReconReport:
    rows: list[ReconRow]
    run_id: str | None = None
    start: datetime | None = None
    end: datetime | None = None
    platform: str | None = None
    totals: dict[str, int] = field(default_factory=dict)

    def count(self, status: str) -> int:
        return sum(1 for row in self.rows if row.status == status)


COLUMNS = [
    "platform", "upstream_id", "run_id", "sample_id", "status", "charge", "charge_currency",
    "recorded_cost", "statement_cost", "cost_currency", "difference",
]  # fmt: skip


def reconcile(
    *,
    run_id: UUID | str | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
    platform: str | None = None,
) -> ReconReport:
    """Join charges, recorded costs and statement lines per upstream task, for one run and/or
    a period [start, end) (ledger entries by booking time, statement lines by occurred_at)."""
    rows: dict[tuple[str, str], ReconRow] = {}

    def row(plat: str, uid: str) -> ReconRow:
        return rows.setdefault((plat, uid), ReconRow(platform=plat, upstream_id=uid))

    scope: dict[str, Any] = {}
    if run_id is not None:
        scope["run_id"] = run_id
    if start is not None:
        scope["created_at__gte"] = start
    if end is not None:
        scope["created_at__lt"] = end
    if platform:
        scope["platform"] = platform
    cost_entries = JournalEntry.objects.filter(
        kind__in=[EntryKind.UPSTREAM_COST, EntryKind.ADJUSTMENT], **scope
    ).exclude(upstream_id="")

    # Recorded costs (connector + adjustments), per task and currency.
    costs = (
        Posting.objects.filter(entry__in=cost_entries, account__kind=AccountKind.UPSTREAM_COST)
        .values("entry__platform", "entry__upstream_id", "account__currency")
        .annotate(total=Sum("amount"))
    )
    for c in costs:
        r = row(c["entry__platform"], c["entry__upstream_id"])
        r.recorded_cost = (r.recorded_cost or 0) + int(c["total"])
        r.cost_currency = c["account__currency"]
    for e in cost_entries.values("platform", "upstream_id", "run_id", "sample_id"):
        r = row(e["platform"], e["upstream_id"])
        r.run_id = r.run_id or (str(e["run_id"]) if e["run_id"] else None)
        r.sample_id = r.sample_id or e["sample_id"]

    # Our charges: captured samples, keyed by the upstream task that answered them.
    settlement_filter = Q(captured__gt=0)
    if run_id is not None:
        settlement_filter &= Q(run_id=run_id)
    if start is not None:
        settlement_filter &= Q(entry__created_at__gte=start)
    if end is not None:
        settlement_filter &= Q(entry__created_at__lt=end)
    if platform:
        settlement_filter &= Q(sample__platform=platform)
    for s in (
        SampleSettlement.objects.filter(settlement_filter)
        .values(
            "sample__platform",
            "sample__upstream_id",
            "captured",
            "run_id",
            "sample_id",
            "entry__postings__account__currency",
        )
        .distinct()
    ):
        uid = s["sample__upstream_id"] or f"(no upstream id: sample {s['sample_id']})"
        r = row(s["sample__platform"], uid)
        r.charge = s["captured"]
        r.charge_currency = s["entry__postings__account__currency"]
        r.run_id = str(s["run_id"])
        r.sample_id = s["sample_id"]

    # Statement lines.
    lines = UpstreamStatementLine.objects.all()
    if platform:
        lines = lines.filter(provider=platform)
    if start is not None:
        lines = lines.filter(occurred_at__gte=start)
    if end is not None:
        lines = lines.filter(occurred_at__lt=end)
    if run_id is not None:
        run_tasks = (
            set(
                Attempt.objects.filter(sample__run_id=run_id)
                .exclude(upstream_id="")
                .values_list("upstream_id", flat=True)
            )
            | set(
                Sample.objects.filter(run_id=run_id)
                .exclude(upstream_id="")
                .values_list("upstream_id", flat=True)
            )
            | {uid for _, uid in rows}
        )
        lines = lines.filter(upstream_id__in=run_tasks)
    for line in lines:
        r = row(line.provider, line.upstream_id)
        r.statement_cost = (r.statement_cost or 0) + line.amount
        r.cost_currency = r.cost_currency or line.currency
        if r.recorded_cost is not None and r.cost_currency != line.currency:
            r.cost_currency = f"{r.cost_currency}/{line.currency}"

    for r in rows.values():
        if r.statement_cost is None:
            r.status = MISSING_UPSTREAM
        elif r.recorded_cost is None:
            r.status = MISSING_OURS
        elif r.recorded_cost == r.statement_cost and "/" not in r.cost_currency:
            r.status = MATCHED
        else:
            r.status = AMOUNT_MISMATCH
    unknown = _unknown_cost_rows(run_id=run_id, start=start, end=end, platform=platform)
    ordered = sorted([*rows.values(), *unknown], key=lambda r: (r.platform, r.upstream_id))
    totals: dict[str, int] = defaultdict(int)
    for r in ordered:
        totals[r.status] += 1
    return ReconReport(
        rows=ordered,
        run_id=str(run_id) if run_id else None,
        start=start,
        end=end,
        platform=platform,
        totals=dict(totals),
    )


def _unknown_cost_rows(
    *,
    run_id: UUID | str | None,
    start: datetime | None,
    end: datetime | None,
    platform: str | None,
) -> list[ReconRow]:
    """Attempts whose outcome was never learned and that were asked again (a platform's
    uncertain policy, pipeline/execution.py): the upstream may have answered and billed
    them, so their cost is unknown, one row each for a person to settle with the provider."""
    attempts = Attempt.objects.filter(error_class=REASKED_UNKNOWN)
    if run_id is not None:
        attempts = attempts.filter(sample__run_id=run_id)
    if platform:
        attempts = attempts.filter(sample__platform=platform)
    if start is not None:
        attempts = attempts.filter(started_at__gte=start)
    if end is not None:
        attempts = attempts.filter(started_at__lt=end)
    return [
        ReconRow(
            platform=plat,
            upstream_id=upstream_id or f"(unknown: attempt {key})",
            run_id=str(run),
            sample_id=sample_id,
            status=COST_UNKNOWN,
        )
        for plat, upstream_id, key, run, sample_id in attempts.values_list(
            "sample__platform", "upstream_id", "idempotency_key", "sample__run_id", "sample_id"
        ).order_by("pk")
    ]


def restricted_to_runs(report: ReconReport, run_ids: set[str]) -> ReconReport:
    """The report with only the rows of these runs (a tenant's view: rows without a run are
    upstream tasks we cannot attribute to any tenant, so they stay with the platform)."""
    rows = [r for r in report.rows if r.run_id is not None and r.run_id in run_ids]
    totals: dict[str, int] = defaultdict(int)
    for r in rows:
        totals[r.status] += 1
    return ReconReport(
        rows=rows,
        run_id=report.run_id,
        start=report.start,
        end=report.end,
        platform=report.platform,
        totals=dict(totals),
    )


def money_totals(report: ReconReport) -> dict[str, dict[str, int]]:
    """Per currency: charged, recorded cost, statement cost, difference (minor units)."""
    totals: dict[str, dict[str, int]] = defaultdict(
        lambda: {"charged": 0, "recorded_cost": 0, "statement_cost": 0, "difference": 0}
    )
    for r in report.rows:
        if r.charge is not None and r.charge_currency:
            totals[r.charge_currency]["charged"] += r.charge
        if r.cost_currency and "/" not in r.cost_currency:
            cost = totals[r.cost_currency]
            cost["recorded_cost"] += r.recorded_cost or 0
            cost["statement_cost"] += r.statement_cost or 0
            cost["difference"] += r.difference
    return dict(totals)


STATUS_EXPLANATIONS = {
    MATCHED: "what we recorded for this upstream task equals the provider's statement",
    AMOUNT_MISMATCH: "both sides have the task but the amounts (or currencies) differ; "
    "settle with an adjustment entry",
    MISSING_UPSTREAM: "we recorded a cost or charged for the task, but no imported statement "
    "lists it yet (import the provider's statement, or ask the provider)",
    MISSING_OURS: "the provider's statement lists a task we have no record of "
    "(a lost callback, or a task that is not ours)",
    COST_UNKNOWN: "a request whose outcome the platform could not confirm, asked again by the "
    "platform's uncertain policy: it may have been answered and billed upstream (check the "
    "provider's usage for its time)",
}


def settle_differences(*, report: ReconReport, memo: str = "") -> list[JournalEntry]:
    """Book an explicit adjustment for every mismatch and every task only the statement knows,
    so that what we recorded equals what the provider billed. Missing-upstream rows need a
    person (a dispute with the provider) and are left alone. Idempotent."""
    entries = []
    for r in report.rows:
        if r.status not in (AMOUNT_MISMATCH, MISSING_OURS) or r.difference == 0:
            continue
        if "/" in r.cost_currency:
            continue  # currencies differ: a person decides
        run = Run.objects.filter(pk=r.run_id).first() if r.run_id else None
        entries.append(
            adjust_upstream_cost(
                platform=r.platform,
                upstream_id=r.upstream_id,
                currency=r.cost_currency,
                amount=r.difference,
                idempotency_key=(
                    f"recon-adjust:{r.platform}:{r.upstream_id}:{r.statement_cost}:"
                    f"{r.cost_currency}"
                ),
                run=run,
                sample_id=r.sample_id,
                memo=memo
                or f"reconciliation: statement {r.statement_cost}, recorded {r.recorded_cost}",
            )
        )
    return entries
