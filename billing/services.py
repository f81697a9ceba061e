"""Billing write operations: prices, quotes, and every movement of money through the ledger.

All amounts are integers in minor units. Every write goes through `post_entry`, which is
idempotent by a client-chosen key (Stripe's rule: same key + same content returns the original
entry; same key + different content is an error) and checks the zero-sum rule before the
database checks it again at COMMIT.

Flows (value moves from the first account to the second):

    top-up      funding(currency)      -> available(tenant)
    reserve     available(tenant)      -> hold(run)                 on launch, estimated_max
    capture     hold(run)              -> revenue(tenant)           per completed sample
                hold(run)              -> available(tenant)         unused part of its share
    release     hold(run)              -> available(tenant)         failed / invalid / cancelled
    refund      revenue(tenant)        -> available(tenant)
    upstream    upstream_payable(plat) -> upstream_cost(plat)       per attempt, provider's cost
    adjustment  explicit, any accounts                              reconciliation differences

The run's hold account row is the per-run billing lock: every hook takes it FOR UPDATE before
it decides anything, so concurrent or repeated calls for one run are serialised.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, F, Q, Sum
from django.utils import timezone

from sampling.models import CollectionState, Run, Sample, SubmissionState, Tenant
from sampling.transitions import PARSE_FAILED

from .models import (
    Account,
    AccountKind,
    EntryKind,
    JournalEntry,
    Posting,
    Price,
    PriceComponent,
    PriceVersion,
    SampleSettlement,
    SettlementReason,
)
from .selectors import unsettled_samples

log = logging.getLogger(__name__)

QUOTE_VERSION = 1
DEEP_THINKING_MODE = "deep_thinking"
ZERO_DECIMAL_CURRENCIES = frozenset({"JPY", "KRW"})


# --- errors ---------------------------------------------------------------------------------


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


def _check_currency(currency: str) -> str:
    if len(currency) != 3 or not currency.isascii() or not currency.isalpha():
        raise BillingError(f"currency {currency!r} is not a three-letter ISO code")
    return currency.upper()


def _check_positive(amount: int, what: str) -> int:
    if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
        raise BillingError(f"{what} must be a positive whole number of minor units, got {amount!r}")
    return amount


# --- accounts -------------------------------------------------------------------------------


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


# --- posting --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SettlementLine:
    sample_id: int
    reason: str
    reserved: int
    captured: int
    released: int
    round: int = 0  # the sample's settlement round (Sample.resumes)


def _content_hash(
    *,
    kind: str,
    legs: Sequence[tuple[Account, int]],
    refs: dict[str, Any],
    settlements: Sequence[SettlementLine],
) -> str:
    content = {
        "kind": kind,
        "refs": refs,
        "legs": sorted([account.code, amount] for account, amount in legs),
        "settlements": sorted(
            [s.sample_id, s.reason, s.reserved, s.captured, s.released, *_round(s)]
            for s in settlements
        ),
    }
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _round(line: SettlementLine) -> list[int]:
    return [line.round] if line.round else []  # round 0 hashes as before rounds existed


def _replay(existing: JournalEntry, content_hash: str, key: str) -> JournalEntry:
    if existing.content_hash != content_hash:
        raise IdempotencyConflict(key=key, existing=existing)
    return existing


def post_entry(
    *,
    idempotency_key: str,
    kind: str,
    legs: Sequence[tuple[Account, int]],
    tenant: Tenant | None = None,
    run: Run | None = None,
    sample_id: int | None = None,
    capture_id: int | None = None,
    platform: str = "",
    upstream_id: str = "",
    reverses: JournalEntry | None = None,
    settlements: Sequence[SettlementLine] = (),
    memo: str = "",
    guard: Callable[[], None] | None = None,
) -> JournalEntry:
    """Post one balanced journal entry, exactly once per `idempotency_key`.

    `legs` are (account, signed amount); they must sum to zero per currency. Accounts that
    track their balance are locked (in id order, so concurrent entries cannot deadlock) and
    may not go negative. `guard` runs after the locks and the replay check, before the
    insert: the place for checks that depend on the ledger's current state.
    """
    if not idempotency_key or len(idempotency_key) > 200:
        raise BillingError("an idempotency key of 1..200 characters is required")
    if len(legs) < 2:
        raise UnbalancedEntry("a journal entry needs at least two postings")
    totals: dict[str, int] = defaultdict(int)
    for account, amount in legs:
        if isinstance(amount, bool) or not isinstance(amount, int) or amount == 0:
            raise BillingError(f"posting amounts are non-zero integers, got {amount!r}")
        totals[account.currency] += amount
    unbalanced = {currency: total for currency, total in totals.items() if total != 0}
    if unbalanced:
        raise UnbalancedEntry(f"postings must sum to zero per currency; they sum to {unbalanced}")
    refs = {
        "tenant": tenant.pk if tenant else None,
        "run": str(run.pk) if run else None,
        "sample": sample_id,
        "capture": capture_id,
        "platform": platform,
        "upstream_id": upstream_id,
        "reverses": reverses.pk if reverses else None,
    }
    content_hash = _content_hash(kind=kind, legs=legs, refs=refs, settlements=settlements)

    with transaction.atomic():
        existing = JournalEntry.objects.filter(idempotency_key=idempotency_key).first()
        if existing is not None:
            return _replay(existing, content_hash, idempotency_key)
        tracked_ids = sorted({a.pk for a, _ in legs if a.tracks_balance})
        locked = {
            a.pk: a
            for a in Account.objects.select_for_update().filter(pk__in=tracked_ids).order_by("pk")
        }
        # Another transaction may have committed this key while we waited for the locks.
        existing = JournalEntry.objects.filter(idempotency_key=idempotency_key).first()
        if existing is not None:
            return _replay(existing, content_hash, idempotency_key)
        changes: dict[int, int] = defaultdict(int)
        for account, amount in legs:
            if account.tracks_balance:
                changes[account.pk] += amount
        for account_id, change in changes.items():
            current = locked[account_id]
            if current.balance + change < 0:
                raise InsufficientBalance(account=current, balance=current.balance, change=change)
        if guard is not None:
            guard()
        try:
            with transaction.atomic():
                entry = JournalEntry.objects.create(
                    idempotency_key=idempotency_key,
                    content_hash=content_hash,
                    kind=kind,
                    tenant=tenant,
                    run=run,
                    sample_id=sample_id,
                    capture_id=capture_id,
                    platform=platform,
                    upstream_id=upstream_id,
                    reverses=reverses,
                    memo=memo,
                )
                # One INSERT for all postings: balanced at the end of the statement, so it also
                # passes with the zero-sum trigger set IMMEDIATE.
                Posting.objects.bulk_create(
                    Posting(entry=entry, account=account, amount=amount) for account, amount in legs
                )
                SampleSettlement.objects.bulk_create(
                    SampleSettlement(
                        entry=entry,
                        run=run,
                        sample_id=s.sample_id,
                        reason=s.reason,
                        reserved=s.reserved,
                        captured=s.captured,
                        released=s.released,
                        round=s.round,
                    )
                    for s in settlements
                )
        except IntegrityError:
            existing = JournalEntry.objects.filter(idempotency_key=idempotency_key).first()
            if existing is None:
                raise
            return _replay(existing, content_hash, idempotency_key)
    log.info("ledger entry %s key=%s kind=%s", entry.pk, idempotency_key, kind)
    return entry


def reverse_entry(*, entry: JournalEntry, idempotency_key: str, memo: str = "") -> JournalEntry:
    """Correct an entry by posting its exact opposite; the original stays as it was.
    Entries that settled samples cannot be reversed (a sample's disposition is final);
    correct those with an adjustment or a refund."""
    if entry.settlements.exists():
        raise BillingError(f"entry #{entry.pk} settled samples; use a refund or an adjustment")
    legs = [(p.account, -p.amount) for p in entry.postings.select_related("account")]
    return post_entry(
        idempotency_key=idempotency_key,
        kind=EntryKind.REVERSAL,
        legs=legs,
        tenant=entry.tenant,
        run=entry.run,
        sample_id=entry.sample_id,
        platform=entry.platform,
        upstream_id=entry.upstream_id,
        reverses=entry,
        memo=memo or f"reversal of entry #{entry.pk}",
    )


# --- money in and out -----------------------------------------------------------------------


def top_up(
    *, tenant: Tenant, amount: int, currency: str, idempotency_key: str, memo: str = ""
) -> JournalEntry:
    """Credit the tenant's available balance. The key is the caller's (e.g. the payment id);
    it is scoped to the tenant."""
    currency = _check_currency(currency)
    _check_positive(amount, "a top-up")
    return post_entry(
        idempotency_key=f"top-up:{tenant.pk}:{idempotency_key}",
        kind=EntryKind.TOP_UP,
        legs=[(funding_account(currency), -amount), (available_account(tenant, currency), amount)],
        tenant=tenant,
        memo=memo,
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
    currency = _check_currency(currency)
    _check_positive(amount, "a refund")
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


# --- prices and quotes ----------------------------------------------------------------------

DEFAULT_PRICE_VERSION = "default-2026-01"
DEFAULT_CURRENCY = "USD"
# USD cents per sample. Direct model APIs are cheap per question; the collector drives a
# consumer UI through a provider that charges us per task (the simulator charges 20-60 cents).
DEFAULT_PRICES: dict[str, dict[str, int]] = {
    "openai": {"base": 5, "deep_thinking": 3, "screenshot": 10},
    "openai_chat": {"base": 4, "deep_thinking": 3, "screenshot": 10},
    "anthropic": {"base": 6, "deep_thinking": 4, "screenshot": 10},
    "gemini": {"base": 4, "deep_thinking": 3, "screenshot": 10},
    "perplexity": {"base": 5, "deep_thinking": 3, "screenshot": 10},
    "deepseek": {"base": 2, "deep_thinking": 2, "screenshot": 10},
    "kimi": {"base": 2, "deep_thinking": 2, "screenshot": 10},
    "doubao": {"base": 2, "deep_thinking": 2, "screenshot": 10},
    "qwen": {"base": 2, "deep_thinking": 2, "screenshot": 10},
    "ollama": {"base": 1, "deep_thinking": 1, "screenshot": 10},
    "collector": {"base": 80, "deep_thinking": 20, "screenshot": 10},
}


def create_price_version(
    *,
    name: str,
    currency: str,
    prices: dict[str, dict[str, int]],
    effective_from: datetime | None = None,
    note: str = "",
) -> PriceVersion:
    """A new immutable price list: {platform: {component: minor units}}; `base` required."""
    currency = _check_currency(currency)
    problems: list[str] = []
    for platform, components in prices.items():
        if "base" not in components:
            problems.append(f"{platform}: a base price is required")
        for component, amount in components.items():
            if component not in PriceComponent.values:
                problems.append(f"{platform}.{component}: unknown component")
            elif isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
                problems.append(f"{platform}.{component}: {amount!r} is not a positive integer")
    if problems:
        raise BillingError("; ".join(problems))
    with transaction.atomic():
        version = PriceVersion.objects.create(
            name=name, currency=currency, effective_from=effective_from or timezone.now(), note=note
        )
        Price.objects.bulk_create(
            Price(version=version, platform=platform, component=component, amount=amount)
            for platform, components in sorted(prices.items())
            for component, amount in sorted(components.items())
        )
    return version


def ensure_default_price_version() -> PriceVersion:
    """The demo's price list (USD cents); created once, found afterwards."""
    existing = PriceVersion.objects.filter(name=DEFAULT_PRICE_VERSION).first()
    if existing is not None:
        return existing
    try:
        return create_price_version(
            name=DEFAULT_PRICE_VERSION,
            currency=DEFAULT_CURRENCY,
            prices=DEFAULT_PRICES,
            effective_from=datetime(2026, 1, 1, tzinfo=UTC),
            note="default prices shipped with the product (USD cents)",
        )
    except IntegrityError:
        return PriceVersion.objects.get(name=DEFAULT_PRICE_VERSION)


def active_price_version(*, at: datetime | None = None) -> PriceVersion:
    version = PriceVersion.objects.filter(effective_from__lte=at or timezone.now()).first()
    if version is None:
        raise NoActivePrice(
            "no price version is in effect; create one (admin: Billing > Price versions) or "
            "call billing.services.ensure_default_price_version()"
        )
    return version


def platform_takes_screenshots(platform: str) -> bool:
    from connectors.registry import UnknownPlatform, get_connector

    try:
        return bool(get_connector(platform).capabilities().screenshots)
    except UnknownPlatform:
        return False


def target_key(platform: str, device: str, region: str, mode: str) -> str:
    return f"{platform}|{device}|{region}|{mode}"


def build_quote(*, run: Run, version: PriceVersion | None = None) -> dict[str, Any]:
    """The run's price, from its samples and one price version. Stored on the run; what the
    operator confirms, and what every later charge of the run is computed from."""
    version = version or active_price_version()
    unit_prices: dict[str, dict[str, int]] = defaultdict(dict)
    for price in version.prices.all():
        unit_prices[price.platform][price.component] = price.amount
    policy = str(run.config_snapshot.get("screenshot_policy", "none"))
    groups = (
        Sample.objects.filter(run=run)
        .values("platform", "device", "region", "mode")
        .annotate(n=Count("id"))
        .order_by("platform", "device", "region", "mode")
    )
    lines: list[dict[str, Any]] = []
    missing: set[str] = set()
    shots: dict[str, bool] = {}
    for group in groups:
        platform = group["platform"]
        components = unit_prices.get(platform, {})
        if "base" not in components:
            missing.add(platform)
            continue
        if platform not in shots:
            shots[platform] = policy != "none" and platform_takes_screenshots(platform)
        deep = group["mode"] == DEEP_THINKING_MODE
        unit = components["base"]
        unit += components.get(PriceComponent.DEEP_THINKING, 0) if deep else 0
        unit += components.get(PriceComponent.SCREENSHOT, 0) if shots[platform] else 0
        lines.append(
            {
                "target": target_key(platform, group["device"], group["region"], group["mode"]),
                "platform": platform,
                "deep_thinking": deep,
                "screenshot": shots[platform],
                "samples": group["n"],
                "unit_price": unit,
                "amount": unit * group["n"],
            }
        )
    if missing:
        raise NoActivePrice(
            f"price version {version.name!r} has no base price for platform(s) "
            f"{', '.join(sorted(missing))}"
        )
    used = {line["platform"] for line in lines}
    return {
        "quote_version": QUOTE_VERSION,
        "price_version": version.name,
        "price_version_id": version.pk,
        "currency": version.currency,
        "unit_prices": {p: dict(sorted(unit_prices[p].items())) for p in sorted(used)},
        "screenshot_policy": policy,
        "lines": lines,
        "samples": sum(line["samples"] for line in lines),
        "estimated_max": sum(line["amount"] for line in lines),
        "rules": (
            "each sample's unit_price is held at launch; a completed sample is charged base "
            "(+ deep_thinking in that mode) (+ screenshot when one was archived), the rest of "
            "its share is released; failed, invalid and never-accepted cancelled samples are "
            "released in full"
        ),
    }


def _quote_line(quote: dict[str, Any], sample: Sample) -> dict[str, Any]:
    key = target_key(sample.platform, sample.device, sample.region, sample.mode)
    for line in quote["lines"]:
        if line["target"] == key:
            return dict(line)
    raise BillingError(f"run {sample.run_id} quote has no line for target {key}")


def _lock_run(run_id: UUID | str) -> tuple[Run, Account | None]:
    """Lock the run's hold account (the per-run billing mutex). None when nothing was held."""
    run = Run.objects.select_related("tenant").get(pk=run_id)
    quote = run.quote_snapshot or {}
    currency = quote.get("currency")
    if not currency or not quote.get("estimated_max"):
        return run, None
    hold = Account.objects.select_for_update().filter(code=f"hold:{run.pk}:{currency}").first()
    return run, hold


def quote_and_reserve(*, run: Run) -> dict[str, Any]:
    """Quote the run from the active price version, store the quote on the run and hold its
    estimated maximum from the tenant's available balance. Call inside the launch's
    transaction: InsufficientFunds / NoActivePrice roll the launch back."""
    with transaction.atomic():
        locked = Run.objects.select_for_update().select_related("tenant").get(pk=run.pk)
        quote = locked.quote_snapshot
        if not quote:
            quote = build_quote(run=locked)
            Run.objects.filter(pk=run.pk).update(quote_snapshot=quote)
        run.quote_snapshot = quote
        amount = int(quote["estimated_max"])
        if amount == 0:
            return quote
        currency = quote["currency"]
        tenant = locked.tenant
        available = available_account(tenant, currency)
        try:
            post_entry(
                idempotency_key=f"reserve:run:{run.pk}",
                kind=EntryKind.RESERVE,
                legs=[(available, -amount), (hold_account(locked, currency), amount)],
                tenant=tenant,
                run=locked,
                memo=f"hold estimated_max of quote {quote['price_version']}",
            )
        except InsufficientBalance as short:
            raise InsufficientFunds(
                tenant=tenant.slug, available=short.balance, required=amount, currency=currency
            ) from None
    return quote


def _screenshot_delivered(sample: Sample) -> bool:
    return sample.evidence_state != "failed" and "SCREENSHOT" not in sample.evidence_reason


def _capture_line(quote: dict[str, Any], sample: Sample) -> SettlementLine:
    line = _quote_line(quote, sample)
    unit = int(line["unit_price"])
    prices = quote["unit_prices"][sample.platform]
    charge = int(prices["base"])
    if line["deep_thinking"]:
        charge += int(prices.get(PriceComponent.DEEP_THINKING, 0))
    if line["screenshot"] and _screenshot_delivered(sample):
        charge += int(prices.get(PriceComponent.SCREENSHOT, 0))
    return SettlementLine(
        sample_id=sample.pk,
        reason=SettlementReason.COMPLETED,
        reserved=unit,
        captured=charge,
        released=unit - charge,
        round=sample.resumes,
    )


def _post_capture(run: Run, hold: Account, sample: Sample) -> JournalEntry:
    quote = run.quote_snapshot or {}
    currency = quote["currency"]
    line = _capture_line(quote, sample)
    legs: list[tuple[Account, int]] = [(hold, -line.reserved)]
    if line.captured:
        legs.append((revenue_account(run.tenant, currency), line.captured))
    if line.released:
        legs.append((available_account(run.tenant, currency), line.released))
    return post_entry(
        idempotency_key=f"capture:sample:{sample.pk}",
        kind=EntryKind.CAPTURE,
        legs=legs,
        tenant=run.tenant,
        run=run,
        sample_id=sample.pk,
        platform=sample.platform,
        upstream_id=sample.upstream_id,
        settlements=[line],
    )


def capture_sample(*, sample_id: int) -> JournalEntry | None:
    """Charge one completed sample by its run's quote. Repeats book nothing new. A sample whose
    share was already released (e.g. cancelled) is not charged; that is logged."""
    with transaction.atomic():
        run_id = Sample.objects.values_list("run_id", flat=True).get(pk=sample_id)
        run, hold = _lock_run(run_id)
        if hold is None:
            log.warning("capture: run %s holds nothing; sample %s not charged", run_id, sample_id)
            return None
        settled = SampleSettlement.objects.filter(sample_id=sample_id).select_related("entry")
        # Charged in any round, or settled in this one (a resume may re-open a released one).
        existing = settled.filter(
            Q(reason=SettlementReason.COMPLETED) | Q(round=F("sample__resumes"))
        ).first()
        if existing is not None:
            if existing.reason != SettlementReason.COMPLETED:
                log.warning(
                    "capture: sample %s was already settled as %s; not charged",
                    sample_id,
                    existing.reason,
                )
                return None
            return existing.entry
        sample = Sample.objects.get(pk=sample_id)
        if sample.collection_state != CollectionState.COMPLETED:
            raise BillingError(
                f"sample {sample_id} is {sample.collection_state}, not completed; nothing to charge"
            )
        return _post_capture(run, hold, sample)


@dataclass
class SettleOutcome:
    captured: list[int] = field(default_factory=list)  # sample ids charged now
    released: dict[str, int] = field(default_factory=dict)  # reason -> amount released now
    awaiting: list[int] = field(default_factory=list)  # sample ids still held


def _release(
    run: Run, hold: Account, samples: Iterable[tuple[Sample, str]], *, purpose: str
) -> JournalEntry | None:
    quote = run.quote_snapshot or {}
    lines = []
    for sample, reason in samples:
        unit = int(_quote_line(quote, sample)["unit_price"])
        lines.append(SettlementLine(sample.pk, reason, unit, 0, unit, sample.resumes))
    total = sum(line.released for line in lines)
    if total == 0:
        return None
    digest = hashlib.sha256(
        ",".join(
            "/".join(map(str, [line.sample_id, *_round(line)]))
            for line in sorted(lines, key=lambda x: x.sample_id)
        ).encode()
    ).hexdigest()[:24]
    return post_entry(
        idempotency_key=f"release:run:{run.pk}:{purpose}:{digest}",
        kind=EntryKind.RELEASE,
        legs=[(hold, -total), (available_account(run.tenant, hold.currency), total)],
        tenant=run.tenant,
        run=run,
        settlements=lines,
        memo=f"{purpose}: {len(lines)} sample(s)",
    )


def _unsettled(run: Run) -> Any:
    return unsettled_samples(run)


def settle_run(*, run_id: UUID | str) -> SettleOutcome:
    """After the run finished: charge completed valid samples not yet charged (a missed
    capture), release failed and invalid samples, keep the rest held as awaiting
    reconciliation. Safe to call any number of times, and again once those are resolved."""
    outcome = SettleOutcome()
    with transaction.atomic():
        run, hold = _lock_run(run_id)
        if hold is None:
            return outcome
        releases: list[tuple[Sample, str]] = []
        for sample in _unsettled(run).order_by("pk"):
            if sample.collection_state == CollectionState.COMPLETED and sample.validity == "valid":
                _post_capture(run, hold, sample)
                outcome.captured.append(sample.pk)
            elif sample.collection_state == CollectionState.FAILED or (
                sample.analysis_reason.startswith(PARSE_FAILED)  # no usable answer: released
            ):
                releases.append((sample, SettlementReason.FAILED))
            elif (
                sample.collection_state == CollectionState.COMPLETED
                and sample.validity == "invalid"
            ):
                releases.append((sample, SettlementReason.INVALID))
            else:
                outcome.awaiting.append(sample.pk)
        entry = _release(run, hold, releases, purpose="settle")
        if entry is not None:
            for line in entry.settlements.all():
                outcome.released[line.reason] = outcome.released.get(line.reason, 0) + line.released
    return outcome


def cancel_run(*, run_id: UUID | str) -> JournalEntry | None:
    """A local cancel: release only samples the upstream never accepted (still planned).
    Accepted, submitting and uncertain samples stay held — the upstream may still run them and
    charge us; they are settled when they end."""
    with transaction.atomic():
        run, hold = _lock_run(run_id)
        if hold is None:
            return None
        planned = list(
            _unsettled(run)
            .select_for_update(of=("self",))
            .filter(submission_state=SubmissionState.PLANNED)
            .exclude(collection_state=CollectionState.COMPLETED)
            .order_by("pk")
        )
        return _release(
            run, hold, [(s, SettlementReason.CANCELLED) for s in planned], purpose="cancel"
        )


# --- upstream costs -------------------------------------------------------------------------


def record_upstream_cost(*, capture_id: int) -> JournalEntry | None:
    """Book the provider's reported cost of one upstream task (one attempt), once per task."""
    from evidence.models import Capture

    capture = Capture.objects.select_related("sample", "sample__run", "sample__tenant").get(
        pk=capture_id
    )
    if not capture.upstream_cost:
        return None
    sample = capture.sample
    currency = _check_currency(
        capture.upstream_cost_currency
        or getattr(settings, "GEO_BILLING_UPSTREAM_CURRENCY", DEFAULT_CURRENCY)
    )
    upstream_id = capture.upstream_id or sample.upstream_id
    key = (
        f"upstream-cost:{sample.platform}:{upstream_id}"
        if upstream_id
        else f"upstream-cost:capture:{capture.pk}"
    )
    amount = int(capture.upstream_cost)
    try:
        return post_entry(
            idempotency_key=key,
            kind=EntryKind.UPSTREAM_COST,
            legs=[
                (upstream_payable_account(sample.platform, currency), -amount),
                (upstream_cost_account(sample.platform, currency), amount),
            ],
            tenant=sample.tenant,
            run=sample.run,
            sample_id=sample.pk,
            platform=sample.platform,
            upstream_id=upstream_id,
        )
    except IdempotencyConflict as conflict:
        # The same upstream task reported twice with different costs: the first booking
        # stands; reconciliation against the provider's statement settles the difference.
        log.warning("upstream cost conflict for %s: %s", key, conflict)
        return None


def adjust_upstream_cost(
    *,
    platform: str,
    upstream_id: str,
    currency: str,
    amount: int,
    idempotency_key: str,
    run: Run | None = None,
    sample_id: int | None = None,
    memo: str = "",
) -> JournalEntry:
    """An explicit adjustment of what an upstream task cost us (positive: it cost more)."""
    currency = _check_currency(currency)
    if isinstance(amount, bool) or not isinstance(amount, int) or amount == 0:
        raise BillingError(f"an adjustment is a non-zero integer, got {amount!r}")
    return post_entry(
        idempotency_key=idempotency_key,
        kind=EntryKind.ADJUSTMENT,
        legs=[
            (upstream_payable_account(platform, currency), -amount),
            (upstream_cost_account(platform, currency), amount),
        ],
        tenant=run.tenant if run else None,
        run=run,
        sample_id=sample_id,
        platform=platform,
        upstream_id=upstream_id,
        memo=memo,
    )
