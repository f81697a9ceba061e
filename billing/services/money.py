"""Money in and out of a tenant's balance (top-ups, refunds) and derived balances."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Sum

from billing.checkpoints import checkpoint_quietly
from billing.models import Account, AccountKind, EntryKind, JournalEntry, Posting, SampleSettlement
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
    entry = post_entry(
        idempotency_key=f"top-up:{tenant.pk}:{idempotency_key}",
        kind=EntryKind.TOP_UP,
        legs=[(funding_account(currency), -amount), (available_account(tenant, currency), amount)],
        tenant=tenant,
        memo=memo,
    )
    transaction.on_commit(checkpoint_quietly)
    return entry


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
