"""Reconciliation: our charges and upstream costs, joined by upstream task id.

Three sources per (platform, upstream task id):
* our charge — what the tenant was charged for the sample that task answered;
* recorded cost — upstream-cost and adjustment entries in our ledger (from the connector);
* statement cost — the provider's imported statement (CSV), unless that statement is voided.

Statements are the platform operator's (the provider bills the platform, not a tenant):
platform finance imports and voids them (tenancy.scope.require_platform_finance, at the
console and the API); a tenant's finance sees the reconciliation of its own runs only
(`restricted_to_runs`). docs/decisions.md, "Provider statements are the platform's".

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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import IO, Any, Protocol
from uuid import UUID

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q, QuerySet, Sum
from django.utils.dateparse import parse_datetime

from connectors.registry import known_platforms
from sampling import inputs
from sampling.models import Attempt, Run, Sample
from sampling.steps import REASKED_UNKNOWN

from .models import (
    AccountKind,
    EntryKind,
    JournalEntry,
    Posting,
    SampleSettlement,
    StatementVoid,
    UpstreamStatement,
    UpstreamStatementLine,
)
from .services import BillingError, adjust_upstream_cost, format_amount
from .services.errors import parse_major

MATCHED = "matched"
AMOUNT_MISMATCH = "amount_mismatch"
MISSING_UPSTREAM = "missing_upstream"
MISSING_OURS = "missing_ours"
COST_UNKNOWN = "cost_unknown"
STATUSES = (MATCHED, AMOUNT_MISMATCH, MISSING_UPSTREAM, MISSING_OURS, COST_UNKNOWN)

REQUIRED_COLUMNS = ("upstream_id", "currency", "occurred_at")
# A statement's amounts: `amount` in major units as a person writes them (0.90 USD), or
# `amount_minor` in minor units where a machine wrote the file (90); exactly one of them.
MAJOR_COLUMN, MINOR_COLUMN = "amount", "amount_minor"
# Kept for callers that name the default; the limit in force is settings.GEO_STATEMENT_MAX_BYTES.
MAX_STATEMENT_BYTES = 16 * 1024 * 1024
# Rows per written batch and per progress report; problems named at most (the rest counted).
IMPORT_BATCH = 2000
MAX_PROBLEMS = 1000
# pg_advisory_xact_lock(class, key): one provider's statements are imported and voided one at
# a time (the "task listed by one live statement" rule is checked under it). Class key:
# arbitrary, distinct from the ledger chain's.
STATEMENT_LOCK_CLASS = 0x5747


# --- statement import -----------------------------------------------------------------------


class StatementError(ValueError):
    """The statement cannot be imported; `problems` names every bad row."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class Progress(Protocol):
    def __call__(self, *, checked: int = ..., total: int = ..., done: int = ...) -> None: ...


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


def _parse_row(
    row_no: int, row: dict[str, str | None], amount_column: str
) -> tuple[dict[str, Any], list[str]]:
    problems: list[str] = []
    cells = {name: (row.get(name) or "").strip() for name in (*REQUIRED_COLUMNS, amount_column)}
    where = f"row {row_no}"
    upstream_id = _checked(
        inputs.identifier, cells["upstream_id"], f"{where}: upstream_id", problems
    )
    currency = _checked(inputs.currency, cells["currency"].upper(), f"{where}: currency", problems)
    amount: int | None = None
    if amount_column == MINOR_COLUMN:
        amount = _checked(
            inputs.amount, cells[MINOR_COLUMN], f"{where}: {MINOR_COLUMN}", problems, minimum=0
        )
    elif currency is not None:  # major units need the currency's decimals
        try:
            amount = parse_major(cells[MAJOR_COLUMN], currency, allow_zero=True)
        except BillingError as error:
            problems.append(f"{where}: {MAJOR_COLUMN}: {error}")
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


def _amount_column(header: list[str]) -> str:
    """Which column holds the amounts (a StatementError when none or both do)."""
    given = [c for c in (MAJOR_COLUMN, MINOR_COLUMN) if c in header]
    if len(given) == 1:
        return given[0]
    if given:
        problem = (
            f"header: both {MAJOR_COLUMN} (major units) and {MINOR_COLUMN} (minor units); "
            "keep one of them"
        )
    else:
        problem = (
            f"header: missing column {MAJOR_COLUMN} (major units, e.g. 0.90) or "
            f"{MINOR_COLUMN} (minor units, e.g. 90) (found {header[:10]})"
        )
    raise StatementError([problem])


def _data_rows(lines: Iterable[str]) -> Iterator[tuple[int, dict[str, str | None], str]]:
    """Rows after the header, numbered as in the file, with the amount column; blank lines
    skipped. A malformed file (a field over the csv module's limit, a broken quote, bytes that
    are not UTF-8) is a StatementError. `lines` is read as it goes (a file, not its text)."""
    reader = csv.DictReader(lines)
    try:
        header = [h.strip() for h in (reader.fieldnames or [])]
        missing = [c for c in REQUIRED_COLUMNS if c not in header]
        if missing:
            raise StatementError(
                [f"header: missing column(s) {', '.join(missing)} (found {header[:10]})"]
            )
        amount_column = _amount_column(header)
        reader.fieldnames = header
        for row_no, row in enumerate(reader, start=2):  # row 1 is the header
            if any((v or "").strip() for k, v in row.items() if k is not None):
                yield row_no, row, amount_column
    except csv.Error as error:
        # line_num counts the lines read before the record that failed.
        line = reader.line_num + 1
        raise StatementError([f"row {line}: not readable as CSV ({error})"]) from None
    except UnicodeDecodeError as error:
        raise StatementError([f"file is not UTF-8: {error}"]) from None


def _file_rows(stream: IO[bytes]) -> Iterator[tuple[int, dict[str, Any], list[str]]]:
    """Every data row of the file from its start, parsed, with its problems; read as it goes
    (the worker holds one row at a time, not the file)."""
    stream.seek(0)
    text = io.TextIOWrapper(stream, encoding="utf-8-sig", newline="")
    try:
        for row_no, row, amount_column in _data_rows(text):
            parsed, problems = _parse_row(row_no, row, amount_column)
            yield row_no, parsed, problems
    finally:
        text.detach()  # the caller's stream stays open for the next pass


def _digest(stream: IO[bytes]) -> str:
    stream.seek(0)
    digest = hashlib.sha256()
    for chunk in iter(lambda: stream.read(1024 * 1024), b""):
        digest.update(chunk)
    return digest.hexdigest()


def configured_provider(provider: str) -> str:
    """A provider is a configured platform (connectors/platforms.py), never free text: a
    statement filed under a misspelt name would match nothing."""
    known = known_platforms()
    if provider not in known:
        shown = str(provider)[:40]
        raise StatementError(
            [f"provider: {shown!r} is not a configured provider; choose one of {', '.join(known)}"]
        )
    return provider


def live_lines() -> QuerySet[UpstreamStatementLine]:
    """Lines of statements that are not voided: the ones that count."""
    return UpstreamStatementLine.objects.filter(statement__void__isnull=True)


def _lock_provider(provider: str) -> None:
    """Serialise imports and voids of one provider's statements until COMMIT (PostgreSQL;
    SQLite runs one writer at a time)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(%s, hashtext(%s))", [STATEMENT_LOCK_CLASS, provider]
            )


class _Problems(list[str]):
    """A StatementError's problems, at most MAX_PROBLEMS named (a file of 400,000 bad rows
    would otherwise be a message of 400,000 lines); the rest are counted."""

    def __init__(self) -> None:
        super().__init__()
        self.more = 0

    def add(self, problems: list[str]) -> None:
        room = MAX_PROBLEMS - len(self)
        self.extend(problems[: max(room, 0)])
        self.more += max(len(problems) - max(room, 0), 0)

    def raise_any(self) -> None:
        if self or self.more:
            tail = [f"... and {self.more} more problem(s)"] if self.more else []
            raise StatementError([*self, *tail])


def _check_statement(stream: IO[bytes], progress: Progress) -> int:
    """The first pass: every row parsed and checked, or a StatementError naming the bad ones;
    the number of data rows."""
    problems = _Problems()
    seen: dict[str, int] = {}
    count = 0
    for row_no, parsed, row_problems in _file_rows(stream):
        problems.add(row_problems)
        uid = parsed["upstream_id"]
        if uid and uid in seen:
            problems.add([f"row {row_no}: upstream_id {uid!r} repeats row {seen[uid]}"])
        seen.setdefault(uid, row_no)
        count += 1
        if count % IMPORT_BATCH == 0:
            progress(checked=count)
    if not count and not problems:
        problems.append("file has no data rows")
    problems.raise_any()
    progress(checked=count, total=count)
    return count


def _fresh_rows(
    provider: str, rows: list[tuple[int, dict[str, Any]]], problems: _Problems
) -> list[tuple[int, dict[str, Any]]]:
    """The rows of a batch no live statement of `provider` lists yet; a listed task with
    another amount is a problem (the message names the platform's own statement, never a
    tenant)."""
    existing = {
        line.upstream_id: line
        for line in live_lines().filter(
            provider=provider, upstream_id__in=[r["upstream_id"] for _, r in rows]
        )
    }
    fresh: list[tuple[int, dict[str, Any]]] = []
    for row_no, parsed in rows:
        old = existing.get(parsed["upstream_id"])
        if old is None:
            fresh.append((row_no, parsed))
        elif (old.amount, old.currency) != (parsed["amount"], parsed["currency"]):
            problems.add(
                [
                    f"row {row_no}: upstream_id {parsed['upstream_id']!r} was imported before "
                    f"with {format_amount(old.amount, old.currency)} (statement "
                    f"#{old.statement_id}, row {old.row_no}); now "
                    f"{format_amount(parsed['amount'], parsed['currency'])}. Void that "
                    "statement first if it was wrong"
                ]
            )
    return fresh


def _batches(
    stream: IO[bytes],
) -> Iterator[list[tuple[int, dict[str, Any]]]]:
    batch: list[tuple[int, dict[str, Any]]] = []
    for row_no, parsed, _ in _file_rows(stream):
        batch.append((row_no, parsed))
        if len(batch) == IMPORT_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _write_lines(statement: UpstreamStatement, stream: IO[bytes], progress: Progress) -> int:
    """The second pass, under the provider's lock: the file's rows written in batches, the
    ones a live statement already lists skipped; any task listed with another amount refuses
    the whole file (the caller's transaction rolls back). The number of lines written."""
    problems = _Problems()
    written = done = 0
    for batch in _batches(stream):
        fresh = _fresh_rows(statement.provider, batch, problems)
        if not problems:
            UpstreamStatementLine.objects.bulk_create(
                UpstreamStatementLine(
                    statement=statement, row_no=row_no, provider=statement.provider, **r
                )
                for row_no, r in fresh
            )
            written += len(fresh)
        done += len(batch)
        progress(done=done)
    problems.raise_any()
    return written


def _no_progress(**_: int) -> None:
    pass


def import_statement_file(
    *,
    provider: str,
    filename: str,
    stream: IO[bytes],
    imported_by: str = "",
    progress: Progress = _no_progress,
    finish: Callable[[ImportResult], None] | None = None,
) -> ImportResult:
    """Import a provider's CSV statement from a seekable binary file, read as it goes:
    `upstream_id,amount,currency,occurred_at` (amount in major units, e.g. 0.90; or an
    `amount_minor` column in minor units; occurred_at ISO 8601 with zone) under a configured
    provider. All or nothing: any malformed row refuses the whole file, naming the bad rows.
    The same file again under the same provider changes nothing while its statement is not
    voided; a task already listed by another live statement of the provider with the same
    amount is skipped, with a different amount it is an error. `progress` hears the rows
    checked (first pass) and written (second pass); `finish` runs inside the transaction that
    wrote the statement (a background import records its outcome there). Callers check that
    the caller is platform finance."""
    provider = configured_provider(provider)
    digest = _digest(stream)
    total = _check_statement(stream, progress)
    with transaction.atomic():
        _lock_provider(provider)
        known = UpstreamStatement.objects.filter(
            provider=provider, sha256=digest, void__isnull=True
        ).first()
        if known is not None:
            result = ImportResult(
                statement=known, created=False, imported=0, already_known=known.rows
            )
        else:
            statement = UpstreamStatement.objects.create(
                provider=provider,
                filename=filename[:255],
                sha256=digest,
                rows=total,
                imported_by=imported_by[:150],
            )
            written = _write_lines(statement, stream, progress)
            result = ImportResult(
                statement=statement, created=True, imported=written, already_known=total - written
            )
        if finish is not None:
            finish(result)
    return result


def import_statement(
    *, provider: str, filename: str, content: bytes, imported_by: str = ""
) -> ImportResult:
    """`import_statement_file` over bytes in memory (the command line, tests); the web
    imports in the background (billing/imports.py)."""
    if len(content) > max_statement_bytes():
        raise StatementError([too_large(len(content))])
    return import_statement_file(
        provider=provider, filename=filename, stream=io.BytesIO(content), imported_by=imported_by
    )


def max_statement_bytes() -> int:
    return int(settings.GEO_STATEMENT_MAX_BYTES)


def too_large(size: int) -> str:
    limit = max_statement_bytes()
    return (
        f"file is {size} bytes, over the {limit}-byte limit ({limit / 1024 / 1024:.0f} MiB) "
        "for a statement"
    )


def void_statement(*, statement_id: int, reason: str, voided_by: str) -> StatementVoid:
    """Void a mistaken statement by appending its correction: its lines stay as imported but
    no longer count, so the right file (or the same file under the right provider) can be
    imported. Adjustments already booked from it stay in the ledger; the next
    `settle_differences` books what the corrected statement differs by."""
    reason = (reason or "").strip()
    if not reason:
        raise StatementError(["reason: say why the statement is voided"])
    statement = UpstreamStatement.objects.filter(pk=statement_id).first()
    if statement is None:
        raise StatementError([f"statement #{statement_id} does not exist"])
    with transaction.atomic():
        _lock_provider(statement.provider)
        if StatementVoid.objects.filter(statement=statement).exists():
            raise StatementError([f"statement #{statement.pk} is already voided"])
        return StatementVoid.objects.create(
            statement=statement, reason=reason[:2000], voided_by=voided_by[:150]
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
    recorded_currency: str = ""
    statement_cost: int | None = None
    statement_currency: str = ""
    # One currency when both sides agree (or one is missing), "USD/CNY" when they differ.
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
        r.recorded_currency = c["account__currency"]
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
    lines = live_lines()
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
    for provider, uid, amount, currency in lines.values_list(
        "provider", "upstream_id", "amount", "currency"
    ).iterator(chunk_size=5000):
        r = row(provider, uid)
        r.statement_cost = (r.statement_cost or 0) + amount
        r.statement_currency = currency

    for r in rows.values():
        sides = [c for c in (r.recorded_currency, r.statement_currency) if c]
        r.cost_currency = "/".join(dict.fromkeys(sides))
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
