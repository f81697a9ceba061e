"""Price versions and the quote a run is launched with."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Count
from django.utils import timezone

from billing.models import (
    Price,
    PriceComponent,
    PriceVersion,
)
from connectors.platforms import default_sample_prices
from connectors.registry import UnknownPlatform, get_connector
from sampling.models import Run, Sample
from sampling.snapshots import NO_SCREENSHOTS, QUOTE_VERSION, Quote, QuoteLine, RunConfig

from .errors import BillingError, NoActivePrice, check_currency

DEEP_THINKING_MODE = "deep_thinking"
DEFAULT_PRICE_VERSION = "default-2026-01"
DEFAULT_CURRENCY = "USD"


def create_price_version(
    *,
    name: str,
    currency: str,
    prices: dict[str, dict[str, int]],
    effective_from: datetime | None = None,
    note: str = "",
) -> PriceVersion:
    """A new immutable price list: {platform: {component: minor units}}; `base` required."""
    currency = check_currency(currency)
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
            prices=default_sample_prices(),  # connectors/platforms.py
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
    try:
        return bool(get_connector(platform).capabilities().screenshots)
    except UnknownPlatform:
        return False


def target_key(platform: str, device: str, region: str, mode: str) -> str:
    return f"{platform}|{device}|{region}|{mode}"


def build_quote(*, run: Run, version: PriceVersion | None = None) -> Quote:
    """The run's price, from its samples and one price version. Stored on the run; what the
    operator confirms, and what every later charge of the run is computed from."""
    groups = (
        Sample.objects.filter(run=run)
        .values("platform", "device", "region", "mode")
        .annotate(n=Count("id"))
        .order_by("platform", "device", "region", "mode")
    )
    policy = RunConfig.of(run).screenshot_policy
    return quote_groups(groups=list(groups), screenshot_policy=policy, version=version)


def quote_groups(
    *, groups: list[dict[str, Any]], screenshot_policy: str, version: PriceVersion | None = None
) -> Quote:
    """The quote of sample counts per target ({platform, device, region, mode, n}, sorted):
    from a launched run's samples (build_quote) or from a plan not yet launched (the preview
    shows exactly what launch will freeze)."""
    version = version or active_price_version()
    unit_prices: dict[str, dict[str, int]] = defaultdict(dict)
    for price in version.prices.all():
        unit_prices[price.platform][price.component] = price.amount
    policy = screenshot_policy
    lines: list[QuoteLine] = []
    missing: set[str] = set()
    shots: dict[str, bool] = {}
    for group in groups:
        platform = group["platform"]
        components = unit_prices.get(platform, {})
        if "base" not in components:
            missing.add(platform)
            continue
        if platform not in shots:
            shots[platform] = policy != NO_SCREENSHOTS and platform_takes_screenshots(platform)
        deep = group["mode"] == DEEP_THINKING_MODE
        unit = components["base"]
        unit += components.get(PriceComponent.DEEP_THINKING, 0) if deep else 0
        unit += components.get(PriceComponent.SCREENSHOT, 0) if shots[platform] else 0
        lines.append(
            QuoteLine(
                target=target_key(platform, group["device"], group["region"], group["mode"]),
                platform=platform,
                deep_thinking=deep,
                screenshot=shots[platform],
                samples=group["n"],
                unit_price=unit,
                amount=unit * group["n"],
            )
        )
    if missing:
        raise NoActivePrice(
            f"price version {version.name!r} has no base price for platform(s) "
            f"{', '.join(sorted(missing))}"
        )
    used = {line.platform for line in lines}
    return Quote(
        quote_version=QUOTE_VERSION,
        price_version=version.name,
        price_version_id=version.pk,
        currency=version.currency,
        unit_prices={p: dict(sorted(unit_prices[p].items())) for p in sorted(used)},
        screenshot_policy=policy,
        lines=tuple(lines),
        samples=sum(line.samples for line in lines),
        estimated_max=sum(line.amount for line in lines),
        rules=(
            "each sample's unit_price is held at launch; a completed sample is charged base "
            "(+ deep_thinking in that mode) (+ screenshot when one was archived), the rest of "
            "its share is released; failed, invalid and never-accepted cancelled samples are "
            "released in full"
        ),
    )
