"""Every ledger invariant, verified over the whole ledger (`manage.py check_ledger`).

Each check is a query that returns the offending rows; an empty list means the ledger is
sound. These repeat what the database already enforces (so a missing trigger, a rebuilt
SQLite table or a TRUNCATE-and-reload shows up) and add what only a whole-ledger view can see.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection
from django.db.models import Count, F, Q, Sum
from django.db.models.functions import Coalesce

from sampling.snapshots import Quote

from .checkpoints import checkpoint_problems, sequence_value
from .ledger_chain import verify_chain
from .models import (
    Account,
    AccountKind,
    EntryKind,
    JournalEntry,
    Posting,
    SampleSettlement,
)

PG_TRIGGERS = frozenset(
    {
        "billing_posting_balanced",
        "billing_entry_has_postings",
        "billing_posting_balance_cache",
        "billing_account_guard",
        "billing_posting_append_only",
        "billing_journalentry_append_only",
        "billing_samplesettlement_append_only",
        "billing_price_append_only",
        "billing_priceversion_append_only",
        "billing_upstreamstatement_append_only",
        "billing_upstreamstatementline_append_only",
        "billing_statementvoid_append_only",
        "billing_journalentry_stamp_xact",
        "billing_posting_same_xact",
        "billing_samplesettlement_same_xact",
        "billing_account_opens_at_zero",
    }
)
SQLITE_TRIGGERS = frozenset(
    {
        "billing_posting_balance_cache",
        "billing_account_identity",
        "billing_account_no_delete",
        "billing_posting_no_update",
        "billing_posting_no_delete",
        "billing_journalentry_no_update",
        "billing_journalentry_no_delete",
        "billing_samplesettlement_no_update",
        "billing_samplesettlement_no_delete",
        "billing_posting_newest_entry",
        "billing_samplesettlement_newest_entry",
        "billing_posting_entry_complete",
        "billing_account_balance_derived",
        "billing_account_opens_at_zero",
    }
)
LIMIT = 50  # offending rows reported per check
# pg_trigger.tgenabled: 'O' fires in the normal ("origin") mode, 'A' always; 'D' is disabled
# and 'R' fires only in replica mode, i.e. never for the application.
PG_FIRING = frozenset({"O", "A"})
# Tables whose id sequence must stay at or above the largest id (setval moves it back, and the
# next insert would then reuse an id a deleted row had).
SEQUENCED_TABLES = (
    "billing_journalentry",
    "billing_posting",
    "billing_samplesettlement",
    "billing_account",
)


@dataclass
class LedgerReport:
    entries: int
    postings: int
    accounts: int
    violations: list[str]

    @property
    def ok(self) -> bool:
        return not self.violations


def _installed_triggers() -> dict[str, bool]:
    """Trigger name -> whether it fires (SQLite has no way to disable one)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT tgname, tgenabled FROM pg_trigger"
                " WHERE tgname LIKE 'billing%%' AND NOT tgisinternal"
            )
            return {name: str(enabled) in PG_FIRING for name, enabled in cursor.fetchall()}
        if connection.vendor == "sqlite":
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
            return {row[0]: True for row in cursor.fetchall()}
        return {}


def _trigger_problems() -> list[str]:
    """Every guard trigger is present and enabled."""
    expected = {"postgresql": PG_TRIGGERS, "sqlite": SQLITE_TRIGGERS}.get(connection.vendor)
    if not expected:
        return []
    installed = _installed_triggers()
    problems = []
    missing = sorted(expected - set(installed))
    if missing:
        problems.append(f"database triggers missing: {', '.join(missing)}")
    disabled = sorted(name for name in expected & set(installed) if not installed[name])
    if disabled:
        problems.append(f"database triggers disabled: {', '.join(disabled)}")
    return problems


def _sequence_problems() -> list[str]:
    """No id sequence is below the largest id of its table."""
    problems = []
    for table in SEQUENCED_TABLES:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT max(id) FROM {table}")
            largest = cursor.fetchone()[0]
        value = sequence_value(table)
        if largest is not None and value < largest:
            problems.append(
                f"{table}: its id sequence is at {value}, below the largest id {largest} "
                "(moved back)"
            )
    return problems


def _hold_sums() -> dict[int, int]:
    rows = (
        Posting.objects.filter(account__kind=AccountKind.HOLD)
        .values("entry_id")
        .annotate(t=Sum("amount"))
    )
    return {r["entry_id"]: int(r["t"]) for r in rows}


def verify_ledger() -> LedgerReport:
    v: list[str] = []

    # Database enforcement is in place and switched on; ids never went back.
    v += _trigger_problems()
    v += _sequence_problems()

    # 1. Each entry sums to zero per currency and has at least two postings.
    for row in (
        Posting.objects.values("entry_id", "account__currency")
        .annotate(t=Sum("amount"))
        .filter(~Q(t=0))
        .order_by("entry_id")[:LIMIT]
    ):
        v.append(
            f"entry #{row['entry_id']} unbalanced: {row['account__currency']} postings sum "
            f"to {row['t']}"
        )
    for short in JournalEntry.objects.annotate(n=Count("postings")).filter(n__lt=2)[:LIMIT]:
        v.append(f"entry #{short.pk} has {short.n} posting(s)")
    for row in (
        Posting.objects.values("account__currency").annotate(t=Sum("amount")).filter(~Q(t=0))
    ):
        v.append(f"ledger total in {row['account__currency']} is {row['t']}, not 0")

    # 2. Amounts are non-zero integers.
    for p in Posting.objects.filter(amount=0)[:LIMIT]:
        v.append(f"posting #{p.pk} has amount 0")

    # 3. Cached balances equal derived balances; tracked balances are never negative.
    accounts = Account.objects.annotate(derived=Coalesce(Sum("postings__amount"), 0))
    for a in accounts.filter(tracks_balance=True).exclude(balance=F("derived"))[:LIMIT]:
        v.append(
            f"account {a.code}: cached balance {a.balance} != derived {a.derived} (opened with "
            "a balance, or the cache was written directly)"
        )
    for a in accounts.filter(tracks_balance=True, derived__lt=0)[:LIMIT]:
        v.append(f"account {a.code}: negative balance {a.derived}")
    for a in accounts.filter(tracks_balance=False).exclude(balance=0)[:LIMIT]:
        v.append(f"account {a.code}: untracked account has a cached balance {a.balance}")
    for a in accounts.filter(kind=AccountKind.REVENUE, derived__lt=0)[:LIMIT]:
        v.append(f"account {a.code}: refunded more than was charged ({a.derived})")

    # 4. Each sample is charged at most once (also a unique constraint) and belongs to the run.
    for row in (
        JournalEntry.objects.filter(kind=EntryKind.CAPTURE, sample_id__isnull=False)
        .values("sample_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)[:LIMIT]
    ):
        v.append(f"sample {row['sample_id']} has {row['n']} capture entries")
    for s in SampleSettlement.objects.exclude(sample__run_id=F("run_id"))[:LIMIT]:
        v.append(f"settlement #{s.pk}: sample {s.sample_id} is not in run {s.run_id}")

    # 5. Settlements agree with the money their entry moved.
    hold_by_entry = _hold_sums()
    for row in (
        SampleSettlement.objects.values("entry_id")
        .annotate(reserved=Sum("reserved"), captured=Sum("captured"))
        .order_by("entry_id")
    ):
        moved = -hold_by_entry.get(row["entry_id"], 0)
        if moved != row["reserved"]:
            v.append(
                f"entry #{row['entry_id']}: settles {row['reserved']} of reserved shares but "
                f"moves {moved} out of the hold"
            )
        revenue = int(
            Posting.objects.filter(
                entry_id=row["entry_id"], account__kind=AccountKind.REVENUE
            ).aggregate(t=Sum("amount"))["t"]
            or 0
        )
        if revenue != row["captured"]:
            v.append(
                f"entry #{row['entry_id']}: settles {row['captured']} captured but credits "
                f"{revenue} to revenue"
            )

    # 6. Per run: reserved = estimated_max; reserved = captured + released + still held.
    holds = Account.objects.filter(kind=AccountKind.HOLD).select_related("run")
    for hold in holds.iterator():
        run = hold.run
        if run is None:
            v.append(f"account {hold.code}: hold without a run")
            continue
        reserved = int(
            Posting.objects.filter(account=hold, entry__kind=EntryKind.RESERVE).aggregate(
                t=Sum("amount")
            )["t"]
            or 0
        )
        quote = Quote.of(run)
        if reserved != (quote.estimated_max if quote else 0):
            v.append(
                f"run {run.pk}: reserved {reserved} != quote estimated_max "
                f"{quote.estimated_max if quote else None}"
            )
        settled = SampleSettlement.objects.filter(run=run).aggregate(
            c=Sum("captured"), r=Sum("released")
        )
        captured, released = int(settled["c"] or 0), int(settled["r"] or 0)
        held = int(Posting.objects.filter(account=hold).aggregate(t=Sum("amount"))["t"] or 0)
        reheld = int(
            Posting.objects.filter(account=hold, entry__kind=EntryKind.REHOLD).aggregate(
                t=Sum("amount")
            )["t"]
            or 0
        )
        if reserved + reheld != captured + released + held:
            v.append(
                f"run {run.pk}: reserved {reserved} + re-held {reheld} != captured {captured} "
                f"+ released {released} + held {held}"
            )
        refunded = -int(
            Posting.objects.filter(
                entry__run=run, entry__kind=EntryKind.REFUND, account__kind=AccountKind.REVENUE
            ).aggregate(t=Sum("amount"))["t"]
            or 0
        )
        if refunded > captured:
            v.append(f"run {run.pk}: refunded {refunded} > captured {captured}")

    # 7. Every entry still says what it said when written, linked to the one before it, and
    # the head the last checkpoint outside the database signed is still there.
    v += verify_chain()
    v += checkpoint_problems()

    # 8. Reversals mirror what they reverse.
    for entry in JournalEntry.objects.filter(kind=EntryKind.REVERSAL).select_related("reverses"):
        if entry.reverses is None:
            v.append(f"reversal #{entry.pk} reverses nothing")
            continue
        mine = sorted((p.account_id, p.amount) for p in entry.postings.all())
        theirs = sorted((p.account_id, -p.amount) for p in entry.reverses.postings.all())
        if mine != theirs:
            v.append(f"reversal #{entry.pk} does not mirror entry #{entry.reverses_id}")

    return LedgerReport(
        entries=JournalEntry.objects.count(),
        postings=Posting.objects.count(),
        accounts=Account.objects.count(),
        violations=v,
    )
