"""Why a billing operation was refused, and how amounts are shown in messages."""

from __future__ import annotations

from billing.models import (
    Account,
    JournalEntry,
)

ZERO_DECIMAL_CURRENCIES = frozenset({"JPY", "KRW"})


class BillingError(ValueError):
    """A billing operation was refused; the message says why."""


class NoActivePrice(BillingError):
    """No price version is in effect, or it has no price for a platform in the run."""


class InsufficientFunds(BillingError):
    def __init__(self, *, tenant: str, available: int, required: int, currency: str) -> None:
        self.tenant = tenant
        self.available = available
        self.required = required
        self.currency = currency
        super().__init__(
            f"tenant {tenant!r} cannot launch this run: available balance "
            f"{format_amount(available, currency)} is less than the quote's estimated maximum "
            f"{format_amount(required, currency)} (short by "
            f"{format_amount(required - available, currency)}); top up first"
        )


class InsufficientBalance(BillingError):
    """A posting would take a balance-tracked account below zero."""

    def __init__(self, *, account: Account, balance: int, change: int) -> None:
        self.account = account
        self.balance = balance
        self.change = change
        super().__init__(
            f"account {account.code} has {format_amount(balance, account.currency)}; "
            f"a change of {change:+d} minor units would make it negative"
        )


class IdempotencyConflict(BillingError):
    def __init__(self, *, key: str, existing: JournalEntry) -> None:
        self.key = key
        self.existing = existing
        super().__init__(
            f"idempotency key {key!r} was already used for entry #{existing.pk} "
            f"({existing.kind}) with different content; use a new key for a new operation"
        )


class UnbalancedEntry(BillingError):
    pass


def format_amount(amount: int, currency: str) -> str:
    if currency in ZERO_DECIMAL_CURRENCIES:
        return f"{amount} {currency}"
    sign = "-" if amount < 0 else ""
    whole, cents = divmod(abs(amount), 100)
    return f"{sign}{whole}.{cents:02d} {currency}"


def check_currency(currency: str) -> str:
    if len(currency) != 3 or not currency.isascii() or not currency.isalpha():
        raise BillingError(f"currency {currency!r} is not a three-letter ISO code")
    return currency.upper()


def check_positive(amount: int, what: str) -> int:
    if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
        raise BillingError(f"{what} must be a positive whole number of minor units, got {amount!r}")
    return amount
