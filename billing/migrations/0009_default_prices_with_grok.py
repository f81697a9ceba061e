"""The shipped price list gains Grok (connectors/platforms.py): a new version, since a price
version never changes once it exists. `default-2026-12` is `default-2026-01` plus `grok`, and
takes effect only where the shipped list is still the active one: a deployment running its own
price list keeps it (and adds `grok` to it before launching Grok samples). The values are frozen
here, as shipped."""

from datetime import UTC, datetime
from typing import Any

from django.db import migrations

PREVIOUS = "default-2026-01"
DEFAULT_PRICE_VERSION = "default-2026-12"
DEFAULT_CURRENCY = "USD"
EFFECTIVE_FROM = datetime(2026, 12, 1, tzinfo=UTC)
ADDED: dict[str, dict[str, int]] = {
    "grok": {"base": 5, "deep_thinking": 3, "screenshot": 10},
}


def add_default_price_version(apps: Any, schema_editor: Any) -> None:
    version_model = apps.get_model("billing", "PriceVersion")
    price_model = apps.get_model("billing", "Price")
    if version_model.objects.filter(name=DEFAULT_PRICE_VERSION).exists():
        return
    active = version_model.objects.order_by("-effective_from", "-id").first()
    if active is None or active.name != PREVIOUS:
        return  # a fresh database gets it from ensure_default_price_version; an operator's own
    version = version_model.objects.create(
        name=DEFAULT_PRICE_VERSION,
        currency=DEFAULT_CURRENCY,
        effective_from=EFFECTIVE_FROM,
        note="default prices shipped with the product (USD cents); adds grok",
    )
    prices = {(p.platform, p.component): p.amount for p in price_model.objects.filter(version=active)}
    for platform, components in ADDED.items():
        for component, amount in components.items():
            prices[(platform, component)] = amount
    price_model.objects.bulk_create(
        price_model(version=version, platform=platform, component=component, amount=amount)
        for (platform, component), amount in sorted(prices.items())
    )


class Migration(migrations.Migration):
    dependencies = [("billing", "0008_statement_imports")]

    operations = [migrations.RunPython(add_default_price_version, migrations.RunPython.noop)]
