"""Why a billing operation was refused, and how amounts are shown in messages."""

from __future__ import annotations

import re
from decimal import Decimal
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


def decimals_of(currency: str) -> int:
    """How many minor-unit digits `currency` has (2, or 0 for JPY and KRW)."""
    return 0 if currency in ZERO_DECIMAL_CURRENCIES else 2


def format_amount(amount: int, currency: str) -> str:
    return f"{major_text(amount, currency)} {currency}"


def major_text(amount: int, currency: str) -> str:
    """Minor units as major units, without the code: 90 USD -> "0.90", 500 JPY -> "500"."""
    decimals = decimals_of(currency)
    if decimals == 0:
        return str(amount)
    sign = "-" if amount < 0 else ""
    whole, fraction = divmod(abs(amount), 10**decimals)
    return f"{sign}{whole}.{fraction:0{decimals}d}"


def major_decimal(amount: int, currency: str) -> Decimal:
    """Minor units as an exact Decimal in major units (a spreadsheet's number cell)."""
    return Decimal(amount).scaleb(-decimals_of(currency))


_MAJOR = re.compile(r"([0-9]+)(?:\.([0-9]+))?")


def parse_major(text: str, currency: str, *, allow_zero: bool = False) -> int:
    """Major units as a person types them ("250", "250.00", "0.90") -> minor units. Refused,
    with the reason: a sign, letters, non-ASCII digits, more decimals than the currency has,
    zero (unless `allow_zero`), more than a 64-bit column holds."""
    currency = check_currency(currency)
    decimals = decimals_of(currency)
    value = text.strip() if isinstance(text, str) else ""
    example = "250" if decimals == 0 else "250.00"
    match = _MAJOR.fullmatch(value)
    if match is None or len(value) > 24:
        raise BillingError(
            f"{value[:40]!r} is not an amount of {currency} in major units (e.g. {example})"
        )
    whole, fraction = match.group(1), match.group(2) or ""
    if len(fraction) > decimals:
        places = "no decimals" if decimals == 0 else f"at most {decimals} decimals"
        raise BillingError(
            f"{value!r}: {currency} amounts in major units have {places} (e.g. {example})"
        )
    amount = int(whole) * 10**decimals + int(fraction.ljust(decimals, "0") or 0)
    if amount == 0 and not allow_zero:
        raise BillingError(f"0 {currency} books nothing: enter an amount above zero")
    if amount > inputs.INT64_MAX:
        raise BillingError(f"{value!r} {currency} is more than this ledger can hold")
    return amount


def parse_amount(text: str, currency: str) -> int:
    """Major units as typed by a person ("250", "250.00") -> minor units; anything else (more
    decimals than the currency has, a sign, letters, zero) is refused with the reason."""
    return parse_major(text, currency)


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
    if amount < 1:
        raise BillingError(f"{what} must be above zero (got {amount})")
    try:
        return inputs.amount(amount, what, minimum=1)
    except inputs.InputError as error:
        raise BillingError(str(error)) from None
