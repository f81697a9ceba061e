"""Grok (connectors/platforms.py) gets sample prices, as the consumer surfaces did in 0009: a
price version is immutable, so this adds a new one, in effect from `migrate`, holding every price
of the version in effect then (the shipped default or an operator's own list, kept as it is)
plus Grok's, when that version lacks it. Prices frozen here as shipped (USD cents); a version in
another currency is left alone (the operator prices Grok in a version of their own). Nothing to
do on a database with no price version yet: ensure_default_price_version prices every
platform."""

from typing import Any

from django.db import migrations
from django.db.models.functions import Now

GROK_PRICES: dict[str, int] = {"base": 5, "deep_thinking": 3, "screenshot": 10}
NAME = "grok-2026-12"


def add_grok_prices(apps: Any, schema_editor: Any) -> None:
    version_model = apps.get_model("billing", "PriceVersion")
    price_model = apps.get_model("billing", "Price")
    if version_model.objects.filter(name=NAME).exists():
        return
    current = (
        version_model.objects.filter(effective_from__lte=Now())
        .order_by("-effective_from", "-id")
        .first()
    )
    if current is None or current.currency != "USD":
        return
    prices = {
        (p.platform, p.component): p.amount for p in price_model.objects.filter(version=current)
    }
    if any(platform == "grok" for platform, _ in prices):
        return
    prices |= {("grok", component): amount for component, amount in GROK_PRICES.items()}
    version = version_model.objects.create(
        name=NAME,
        currency="USD",
        effective_from=Now(),
        note=f"{current.name} and Grok's prices (USD cents)",
    )
    price_model.objects.bulk_create(
        price_model(version=version, platform=platform, component=component, amount=amount)
        for (platform, component), amount in sorted(prices.items())
    )


class Migration(migrations.Migration):
    dependencies = [("billing", "0009_consumer_surface_prices")]

    operations = [migrations.RunPython(add_grok_prices, migrations.RunPython.noop)]
