"""Prices for platforms added after a deployment has a price list, for data migrations.

A price version never changes once created, so a new platform's prices come in a new version,
in effect from `migrate`: every price of the version in effect then (the shipped default or
the operator's own list, kept as it is) plus the new platforms' prices it lacks. A version in
another currency than the shipped prices' is left alone (the operator prices the platform in a
version of their own). Nothing to do on a database with no price version yet:
billing.services.ensure_default_price_version prices every declared platform.

Migrations pass their prices frozen as shipped and use the historical models (`apps`); this
module imports no model, so what it does is what the migration did when it first ran.
"""

from __future__ import annotations

from typing import Any

from django.db.models.functions import Now


def add_platform_prices(
    apps: Any,
    *,
    name: str,
    prices: dict[str, dict[str, int]],
    note: str,
    currency: str = "USD",
) -> None:
    """A version `name` holding the current prices and `prices` (platform -> component ->
    minor units of `currency`) for each platform the current version does not price."""
    version_model = apps.get_model("billing", "PriceVersion")
    price_model = apps.get_model("billing", "Price")
    if version_model.objects.filter(name=name).exists():
        return
    current = (
        version_model.objects.filter(effective_from__lte=Now())
        .order_by("-effective_from", "-id")
        .first()
    )
    if current is None or current.currency != currency:
        return
    kept = {
        (p.platform, p.component): p.amount for p in price_model.objects.filter(version=current)
    }
    priced = {platform for platform, _ in kept}
    missing = {
        (platform, component): amount
        for platform, components in prices.items()
        if platform not in priced
        for component, amount in components.items()
    }
    if not missing:
        return
    version = version_model.objects.create(
        name=name, currency=currency, effective_from=Now(), note=f"{current.name} and {note}"
    )
    price_model.objects.bulk_create(
        price_model(version=version, platform=platform, component=component, amount=amount)
        for (platform, component), amount in sorted((kept | missing).items())
    )
