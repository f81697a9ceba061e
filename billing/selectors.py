"""Reads over the ledger. Balances come from postings; the cached `Account.balance` of tracked
accounts is used where speed matters and verified by `check_ledger`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any
from uuid import UUID

from django.db import connection, transaction
from django.db.models import (
    Case,
    Count,
    Exists,
    F,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    When,
)
from django.db.models.functions import Coalesce

from sampling.models import CollectionState, Run, Sample, SubmissionState
from sampling.snapshots import Quote
from sampling.transitions import PARSE_FAILED
from tenancy.models import Tenant

from .models import Account, AccountKind, EntryKind, Posting, SampleSettlement, SettlementReason


def _sum(qs: Any, column: str = "amount") -> int:
    return int(qs.aggregate(t=Sum(column))["t"] or 0)


def with_balances(accounts: QuerySet[Account]) -> QuerySet[Account]:
    """Each account with `ledger_balance`: the cached balance where the database keeps one
    (available and hold accounts, written with every posting), else the sum of its postings.
    Revenue, funding and upstream accounts keep no cache: every capture would otherwise lock
    the tenant's revenue row (docs/decisions.md)."""
    posted = (
        Posting.objects.filter(account=OuterRef("pk"))
        .order_by()
        .values("account")
        .annotate(total=Sum("amount"))
        .values("total")
    )
    return accounts.annotate(
        ledger_balance=Case(
            When(tracks_balance=True, then=F("balance")),
            default=Coalesce(Subquery(posted), 0),
        )
    )


def account_balance(account: Account) -> int:
    """Derived from postings."""
    return _sum(Posting.objects.filter(account=account))


def available_balance(tenant: Tenant, currency: str, *, derived: bool = False) -> int:
    """What the tenant can spend: top-ups + releases + refunds - holds. The cached balance is
    kept by a database trigger in the same statement as each posting; `derived=True` sums the
    postings instead."""
    account = Account.objects.filter(code=f"available:{tenant.pk}:{currency}").first()
    if account is None:
        return 0
    return account_balance(account) if derived else account.balance


def held_balance(tenant: Tenant, currency: str) -> int:
    return _sum(
        Account.objects.filter(tenant=tenant, kind=AccountKind.HOLD, currency=currency), "balance"
    )


@dataclass
class TenantBalance:
    currency: str
    available: int
    held: int
    charged: int  # captured, net of refunds
    refunded: int


def tenant_balances(tenant: Tenant) -> list[TenantBalance]:
    currencies = sorted(
        set(Account.objects.filter(tenant=tenant).values_list("currency", flat=True))
    )
    result = []
    for currency in currencies:
        refunded = -_sum(
            Posting.objects.filter(
                entry__kind=EntryKind.REFUND,
                account__kind=AccountKind.REVENUE,
                account__tenant=tenant,
                account__currency=currency,
            )
        )
        charged = _sum(
            Posting.objects.filter(
                account__kind=AccountKind.REVENUE,
                account__tenant=tenant,
                account__currency=currency,
            )
        )
        result.append(
            TenantBalance(
                currency=currency,
                available=available_balance(tenant, currency, derived=True),
                held=_sum(
                    Posting.objects.filter(
                        account__kind=AccountKind.HOLD,
                        account__tenant=tenant,
                        account__currency=currency,
                    )
                ),
                charged=charged,
                refunded=refunded,
            )
        )
    return result


@dataclass
class RunBilling:
    """A run's money, kept apart by outcome."""

    run_id: str
    currency: str | None
    price_version: str | None
    estimated_max: int
    reserved: int
    captured: int  # completed samples, charged
    released_unused: int  # completed samples: quoted components not delivered
    released_failed: int  # failed samples
    released_invalid: int  # completed but invalid answers
    released_cancelled: int  # cancelled before the upstream accepted them
    held: int  # still on hold: samples awaiting an outcome or reconciliation
    # None when read without the per-sample scan (run_billing(scan_samples=False)).
    awaiting_samples: int | None
    awaiting_accepted_samples: int | None  # of those, accepted/uncertain upstream (may cost us)
    refunded: int
    samples_charged: int
    upstream_costs: dict[str, int] = field(default_factory=dict)
    reheld: int = 0  # released shares held again for samples a resume asked again

    @property
    def released(self) -> int:
        return (
            self.released_unused
            + self.released_failed
            + self.released_invalid
            + self.released_cancelled
        )

    @property
    def balanced(self) -> bool:
        """reserved + re-held = captured + released + still held."""
        return self.reserved + self.reheld == self.captured + self.released + self.held

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(released=self.released, balanced=self.balanced)
        return data


def run_billing(*, run_id: UUID | str, scan_samples: bool = True) -> RunBilling:
    """A run's money, read from one snapshot: the figures add up even while a worker is
    charging or settling the run. `scan_samples=False` leaves out the samples still awaiting
    settlement (an anti-join over every sample of the run), for pages that must stay fast
    at a million samples and do not show them."""
    with snapshot():
        return _run_billing(run_id=run_id, scan_samples=scan_samples)


@contextmanager
def snapshot() -> Iterator[None]:
    """Reads in one consistent snapshot (REPEATABLE READ on PostgreSQL) when not already
    inside a transaction, which fixes its own isolation."""
    if connection.in_atomic_block or connection.vendor != "postgresql":
        yield
        return
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        yield


def _run_billing(*, run_id: UUID | str, scan_samples: bool) -> RunBilling:
    run = Run.objects.get(pk=run_id)
    quote = Quote.of(run) or Quote()
    settlements = SampleSettlement.objects.filter(run=run)

    def released(reason: str) -> int:
        return _sum(settlements.filter(reason=reason), "released")

    awaiting = unsettled_samples(run)
    costs: dict[str, int] = {}
    for row in (
        Posting.objects.filter(
            entry__run=run,
            entry__kind__in=[EntryKind.UPSTREAM_COST, EntryKind.ADJUSTMENT],
            account__kind=AccountKind.UPSTREAM_COST,
        )
        .values("account__currency")
        .annotate(t=Sum("amount"))
    ):
        costs[row["account__currency"]] = int(row["t"])
    return RunBilling(
        run_id=str(run.pk),
        currency=quote.currency or None,
        price_version=quote.price_version or None,
        estimated_max=quote.estimated_max,
        reserved=_sum(
            Posting.objects.filter(
                entry__run=run, entry__kind=EntryKind.RESERVE, account__kind=AccountKind.HOLD
            )
        ),
        captured=_sum(settlements, "captured"),
        released_unused=released(SettlementReason.COMPLETED),
        released_failed=released(SettlementReason.FAILED),
        released_invalid=released(SettlementReason.INVALID),
        released_cancelled=released(SettlementReason.CANCELLED),
        held=_sum(Posting.objects.filter(account__run=run, account__kind=AccountKind.HOLD)),
        awaiting_samples=awaiting.count() if scan_samples else None,
        awaiting_accepted_samples=awaiting.filter(
            submission_state__in=[SubmissionState.ACCEPTED, SubmissionState.UNCERTAIN]
        ).count()
        if scan_samples
        else None,
        refunded=-_sum(
            Posting.objects.filter(
                entry__run=run, entry__kind=EntryKind.REFUND, account__kind=AccountKind.REVENUE
            )
        ),
        samples_charged=settlements.filter(reason=SettlementReason.COMPLETED).count(),
        upstream_costs=costs,
        reheld=_sum(
            Posting.objects.filter(
                entry__run=run, entry__kind=EntryKind.REHOLD, account__kind=AccountKind.HOLD
            )
        ),
    )


def _settled_this_round() -> Exists:
    """Over a sample (OuterRef): it was charged, or settled in its current round."""
    return Exists(
        SampleSettlement.objects.filter(sample_id=OuterRef("pk")).filter(
            Q(reason=SettlementReason.COMPLETED) | Q(round=OuterRef("resumes"))
        )
    )


def unsettled_samples(run: Run) -> QuerySet[Sample]:
    """The run's samples whose share is still held: not charged, and not settled in their
    current round (a resume re-opens released samples into a new round)."""
    return Sample.objects.filter(run=run).exclude(_settled_this_round())


# The samples `settle_run` disposes of once their run finished, the union of its branches:
# charged (completed and valid), released as failed (collection failed, or an answer the
# parser could not read), released as invalid (completed and invalid). Every other unsettled
# sample stays held, awaiting reconciliation.
SETTLEABLE = (
    Q(collection_state=CollectionState.COMPLETED, validity__in=["valid", "invalid"])
    | Q(collection_state=CollectionState.FAILED)
    | Q(analysis_reason__startswith=PARSE_FAILED)
)


def finished_runs_holding() -> QuerySet[Run]:
    """Finished runs whose hold account still holds money for samples `settle_run` would
    settle now: their settlement never ran (a lost run-finished event) or left them behind.
    Money held for samples awaiting a person (in review) is not counted: it is meant to be."""
    held = Account.objects.filter(run=OuterRef("pk"), kind=AccountKind.HOLD, balance__gt=0)
    waiting = (
        Sample.objects.filter(run=OuterRef("pk")).filter(SETTLEABLE).exclude(_settled_this_round())
    )
    return Run.objects.exclude(finished_at=None).filter(Exists(held), Exists(waiting))


@dataclass(frozen=True)
class CancelRelease:
    """What cancelling a run now would do to its money (a preview; `release_unaccepted_hold`
    decides again under the run's lock): the share held for samples the upstream never
    accepted goes back to the balance, the rest stays held until those samples end, and what
    was charged stays charged."""

    currency: str | None
    samples: int  # not yet submitted: they will not run
    released: int  # their share of the hold, back to the available balance
    still_held: int  # held for work already submitted: charged if it succeeds
    charged: int  # accepted work, charged already
    samples_charged: int


def cancel_release(*, run_id: UUID | str) -> CancelRelease:
    """The same samples `billing.services.release_unaccepted_hold` releases, priced from the
    run's quote lines, read in one snapshot with the run's hold and charges."""
    with snapshot():
        run = Run.objects.get(pk=run_id)
        quote = Quote.of(run) or Quote()
        unaccepted = (
            unsettled_samples(run)
            .filter(submission_state=SubmissionState.PLANNED)
            .exclude(collection_state=CollectionState.COMPLETED)
        )
        samples = released = 0
        for group in unaccepted.values("platform", "device", "region", "mode").annotate(
            n=Count("pk")
        ):
            target = "|".join(group[k] for k in ("platform", "device", "region", "mode"))
            line = quote.line_for(target)
            samples += group["n"]
            released += group["n"] * (line.unit_price if line else 0)
        if not quote.holds_money:
            released = 0
        held = _sum(Posting.objects.filter(account__run=run, account__kind=AccountKind.HOLD))
        charged = SampleSettlement.objects.filter(run=run, reason=SettlementReason.COMPLETED)
        return CancelRelease(
            currency=quote.currency or None,
            samples=samples,
            released=min(released, held),
            still_held=max(held - released, 0),
            charged=_sum(SampleSettlement.objects.filter(run=run), "captured"),
            samples_charged=charged.count(),
        )
