"""Ledger accounts: one per (purpose, owner, currency), created on first use."""

from __future__ import annotations

from uuid import UUID

from billing.models import (
    Account,
    AccountKind,
)
from sampling.models import Run, Tenant


def _account(
    *,
    code: str,
    kind: str,
    currency: str,
    tenant: Tenant | None = None,
    run_id: UUID | None = None,
    platform: str = "",
    tracks_balance: bool = False,
) -> Account:
    account, _ = Account.objects.get_or_create(
        code=code,
        defaults={
            "kind": kind,
            "currency": currency,
            "tenant": tenant,
            "run_id": run_id,
            "platform": platform,
            "tracks_balance": tracks_balance,
        },
    )
    return account


def funding_account(currency: str) -> Account:
    return _account(code=f"funding:{currency}", kind=AccountKind.FUNDING, currency=currency)


def available_account(tenant: Tenant, currency: str) -> Account:
    return _account(
        code=f"available:{tenant.pk}:{currency}",
        kind=AccountKind.AVAILABLE,
        currency=currency,
        tenant=tenant,
        tracks_balance=True,
    )


def revenue_account(tenant: Tenant, currency: str) -> Account:
    return _account(
        code=f"revenue:{tenant.pk}:{currency}",
        kind=AccountKind.REVENUE,
        currency=currency,
        tenant=tenant,
    )


def hold_account(run: Run, currency: str) -> Account:
    return _account(
        code=f"hold:{run.pk}:{currency}",
        kind=AccountKind.HOLD,
        currency=currency,
        tenant=run.tenant,
        run_id=run.pk,
        tracks_balance=True,
    )


def upstream_cost_account(platform: str, currency: str) -> Account:
    return _account(
        code=f"upstream_cost:{platform}:{currency}",
        kind=AccountKind.UPSTREAM_COST,
        currency=currency,
        platform=platform,
    )


def upstream_payable_account(platform: str, currency: str) -> Account:
    return _account(
        code=f"upstream_payable:{platform}:{currency}",
        kind=AccountKind.UPSTREAM_PAYABLE,
        currency=currency,
        platform=platform,
    )
