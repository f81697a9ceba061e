"""Why a billing operation was refused, and how amounts are shown in messages."""

from __future__ import annotations

from typing import Any

from billing.models import (
    Account,
    JournalEntry,
)
from sampling import inputs

ZERO_DECIMAL_CURRENCIES = frozenset({"JPY", "KRW"})


class BillingError(ValueError):
    """A billing operation was refused; the message says why. Keyword `details` become
    attributes, so callers can act on the figures without parsing the message."""

    def __init__(self, message: str = "", **details: Any) -> None:
        super().__init__(message)
        self.__dict__.update(details)


class NoActivePrice(BillingError):
    """No price version is in effect, or it has no price for a platform in the run."""


class InsufficientFunds(BillingError):
    tenant: str
    available: int
    required: int
    currency: str

    def __init__(self, *, tenant: str, available: int, required: int, currency: str) -> None:
        short = format_amount(required - available, currency)
        super().__init__(
            f"tenant {tenant!r} cannot launch this run: available balance "
            f"{format_amount(available, currency)} is less than the quote's estimated maximum "
            f"{format_amount(required, currency)} (short by {short}); top up first",
            tenant=tenant,
            available=available,
            required=required,
            currency=currency,
        )


class InsufficientBalance(BillingError):
    """A posting would take a balance-tracked account below zero."""

    account: Account
    balance: int
    change: int

    def __init__(self, *, account: Account, balance: int, change: int) -> None:
        super().__init__(
            f"account {account.code} has {format_amount(balance, account.currency)}; "
            f"a change of {change:+d} minor units would make it negative",
            account=account,
            balance=balance,
            change=change,
        )


class IdempotencyConflict(BillingError):
    key: str
    existing: JournalEntry

    def __init__(self, *, key: str, existing: JournalEntry) -> None:
        super().__init__(
            f"idempotency key {key!r} was already used for entry #{existing.pk} "
            f"({existing.kind}) with different content; use a new key for a new operation",
            key=key,
            existing=existing,
        )


class UnbalancedEntry(BillingError):
    pass


def format_amount(amount: int, currency: str) -> str:
    if currency in ZERO_DECIMAL_CURRENCIES:
        return f"{amount} {currency}"
    sign = "-" if amount < 0 else ""
    whole, cents = divmod(abs(amount), 100)
    return f"{sign}{whole}.{cents:02d} {currency}"


def parse_amount(text: str, currency: str) -> int:
    """Major units as typed by a person ("250", "250.00") -> minor units; anything else (more
    decimals than the currency has, a sign, letters) is refused with the reason."""
    currency = check_currency(currency)
    decimals = 0 if currency in ZERO_DECIMAL_CURRENCIES else 2
    value = text.strip()
    whole, _, fraction = value.partition(".")
    if not whole.isdigit() or (fraction and not fraction.isdigit()) or len(fraction) > decimals:
        raise BillingError(
            f"amount {text!r} is not a positive amount of {currency} in major units "
            f"(e.g. {'250' if decimals == 0 else '250.00'})"
        )
    amount = int(whole) * 10**decimals + int(fraction.ljust(decimals, "0") or 0)
    return check_positive(amount, "an amount")


def check_currency(currency: str) -> str:
    """An ISO code by the input rules (sampling/inputs.py); ASCII lowercase is uppercased."""
    code = currency.upper() if isinstance(currency, str) and currency.isascii() else currency
    try:
        return inputs.currency(code, "currency")
    except inputs.InputError as error:
        raise BillingError(str(error)) from None


def check_positive(amount: int, what: str) -> int:
    """A positive int of minor units within int64 (a string of digits is not an amount here)."""
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise BillingError(f"{what} must be a positive whole number of minor units, got {amount!r}")
    try:
        return inputs.amount(amount, what, minimum=1)
    except inputs.InputError as error:
        raise BillingError(str(error)) from None
