"""The consumer surfaces (chatgpt_web, google_ai_overview, google_ai_mode, copilot_web,
gemini_web, perplexity_web; connectors/platforms.py) get sample prices: a price version is
immutable, so this adds a new one, in effect from `migrate`, holding every price of the version
in effect then (the shipped default or an operator's own list, kept as it is) plus the surfaces'
prices it lacks. Prices frozen here as shipped (USD cents); a version in another currency is
left alone (the operator prices the surfaces in a version of their own). Nothing to do on a
database with no price version yet: ensure_default_price_version prices every platform."""

from typing import Any

from django.db import migrations
from django.db.models.functions import Now

SURFACE_PRICES: dict[str, dict[str, int]] = {
    "chatgpt_web": {"base": 60, "deep_thinking": 20, "screenshot": 10},
    "google_ai_overview": {"base": 40, "deep_thinking": 20, "screenshot": 10},
    "google_ai_mode": {"base": 40, "deep_thinking": 20, "screenshot": 10},
    "copilot_web": {"base": 60, "deep_thinking": 20, "screenshot": 10},
    "gemini_web": {"base": 60, "deep_thinking": 20, "screenshot": 10},
    "perplexity_web": {"base": 60, "deep_thinking": 20, "screenshot": 10},
}
NAME = "surfaces-2026-12"


def add_surface_prices(apps: Any, schema_editor: Any) -> None:
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
    missing = {
        (platform, component): amount
        for platform, components in SURFACE_PRICES.items()
        if not any(key[0] == platform for key in prices)
        for component, amount in components.items()
    }
    if not missing:
        return
    version = version_model.objects.create(
        name=NAME,
        currency="USD",
        effective_from=Now(),
        note=f"{current.name} and the consumer surfaces' prices (USD cents)",
    )
    price_model.objects.bulk_create(
        price_model(version=version, platform=platform, component=component, amount=amount)
        for (platform, component), amount in sorted((prices | missing).items())
    )


class Migration(migrations.Migration):
    dependencies = [("billing", "0008_statement_imports")]

    operations = [migrations.RunPython(add_surface_prices, migrations.RunPython.noop)]
