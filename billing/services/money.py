"""Money in and out of a tenant's balance (top-ups, refunds) and derived balances."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Sum
from django.db.models.functions import Now

from billing.checkpoints import checkpoint_quietly
from billing.models import (
    Account,
    AccountKind,
    EntryKind,
    JournalEntry,
    Posting,
    PriceVersion,
    SampleSettlement,
)
from sampling.models import Run
from tenancy.models import Tenant

from .accounts import available_account, funding_account, revenue_account
from .errors import BillingError, check_currency, check_positive, format_amount
from .posting import post_entry


def top_up(
    *, tenant: Tenant, amount: int, currency: str, idempotency_key: str, memo: str = ""
) -> JournalEntry:
    """Credit the tenant's available balance. The key is the caller's (e.g. the payment id);
    it is scoped to the tenant. Once committed, the chain's head is checkpointed outside
    the database (billing/checkpoints.py)."""
    currency = check_currency(currency)
    check_positive(amount, "a top-up")
    check_billed_currency(tenant, currency)
    entry = post_entry(
        idempotency_key=f"top-up:{tenant.pk}:{idempotency_key}",
        kind=EntryKind.TOP_UP,
        legs=[(funding_account(currency), -amount), (available_account(tenant, currency), amount)],
        tenant=tenant,
        memo=memo,
    )
    transaction.on_commit(checkpoint_quietly)
    return entry


def billed_currencies(tenant: Tenant) -> set[str]:
    """The currencies a tenant's money can be spent in: the price list's in effect (runs are
    quoted in it) and any the tenant already holds a balance in."""
    held = Account.objects.filter(tenant=tenant, kind=AccountKind.AVAILABLE)
    currencies = set(held.values_list("currency", flat=True))
    version = PriceVersion.objects.filter(effective_from__lte=Now()).first()
    if version is not None:
        currencies.add(version.currency)
    return currencies


def check_billed_currency(tenant: Tenant, currency: str) -> None:
    """A top-up in a currency no price list quotes would sit unspendable: refused. With no
    price list in effect and no balance yet there is nothing to judge by (a fresh database
    before its price list): accepted."""
    billed = billed_currencies(tenant)
    if billed and currency not in billed:
        raise BillingError(
            f"tenant {tenant.slug!r} is billed in {', '.join(sorted(billed))}; a top-up in "
            f"{currency} could never be spent",
            currency=currency,
            billed=sorted(billed),
        )


def refund(
    *,
    tenant: Tenant,
    amount: int,
    currency: str,
    idempotency_key: str,
    run: Run | None = None,
    sample_id: int | None = None,
    memo: str = "",
) -> JournalEntry:
    """Give back captured money as its own entry. Never more than was captured (for the run
    when one is given, for the tenant otherwise), net of earlier refunds."""
    currency = check_currency(currency)
    check_positive(amount, "a refund")
    if run is not None and run.tenant_id != tenant.pk:
        raise BillingError(f"run {run.pk} does not belong to tenant {tenant.slug!r}")
    revenue = revenue_account(tenant, currency)

    def guard() -> None:
        if run is not None:
            refundable = run_refundable(run=run, currency=currency)
            scope = f"run {run.pk}"
        else:
            refundable = derived_balance(revenue)
            scope = f"tenant {tenant.slug!r}"
        if amount > refundable:
            raise BillingError(
                f"refund of {format_amount(amount, currency)} exceeds what {scope} can get back "
                f"({format_amount(refundable, currency)} captured and not yet refunded)"
            )

    return post_entry(
        idempotency_key=f"refund:{tenant.pk}:{idempotency_key}",
        kind=EntryKind.REFUND,
        legs=[(revenue, -amount), (available_account(tenant, currency), amount)],
        tenant=tenant,
        run=run,
        sample_id=sample_id,
        memo=memo,
        guard=guard,
    )


def derived_balance_sum(account_id: int) -> int:
    total = Posting.objects.filter(account_id=account_id).aggregate(t=Sum("amount"))["t"]
    return int(total or 0)


def derived_balance(account: Account) -> int:
    """An account's balance, summed from its postings (the source of truth)."""
    return derived_balance_sum(account.pk)


def run_refundable(*, run: Run, currency: str) -> int:
    captured = SampleSettlement.objects.filter(run=run).aggregate(t=Sum("captured"))["t"] or 0
    refunded = (
        Posting.objects.filter(
            entry__run=run,
            entry__kind=EntryKind.REFUND,
            account__kind=AccountKind.REVENUE,
            account__currency=currency,
        ).aggregate(t=Sum("amount"))["t"]
        or 0
    )
    return int(captured) + int(refunded)  # refund postings on revenue are negative
