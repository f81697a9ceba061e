"""Ledger accounts: one per (purpose, owner, currency), created on first use."""

from __future__ import annotations

from typing import Any

from billing.models import (
    Account,
    AccountKind,
)
from sampling.models import Run
from tenancy.models import Tenant


def account_code(kind: str, currency: str, owner: object = None) -> str:
    """`kind:owner:currency` (`funding:USD` has no owner): unique, and readable in exports."""
    parts = [kind] + ([] if owner is None else [str(owner)]) + [currency]
    return ":".join(parts)


def _account(
    kind: str, currency: str, owner: object = None, *, tracks_balance: bool = False, **refs: Any
) -> Account:
    """The account for (kind, owner, currency), created on first use. `refs` are its owner
    columns (tenant, run_id, platform)."""
    account, _ = Account.objects.get_or_create(
        code=account_code(kind, currency, owner),
        defaults={"kind": kind, "currency": currency, "tracks_balance": tracks_balance, **refs},
    )
    return account


def funding_account(currency: str) -> Account:
    return _account(AccountKind.FUNDING, currency)


def available_account(tenant: Tenant, currency: str) -> Account:
    return _account(AccountKind.AVAILABLE, currency, tenant.pk, tenant=tenant, tracks_balance=True)


def revenue_account(tenant: Tenant, currency: str) -> Account:
    return _account(AccountKind.REVENUE, currency, tenant.pk, tenant=tenant)


def hold_account(run: Run, currency: str) -> Account:
    return _account(
        AccountKind.HOLD, currency, run.pk, tenant=run.tenant, run_id=run.pk, tracks_balance=True
    )


def upstream_cost_account(platform: str, currency: str) -> Account:
    return _account(AccountKind.UPSTREAM_COST, currency, platform, platform=platform)


def upstream_payable_account(platform: str, currency: str) -> Account:
    return _account(AccountKind.UPSTREAM_PAYABLE, currency, platform, platform=platform)
