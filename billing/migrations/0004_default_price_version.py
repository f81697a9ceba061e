"""A fresh install can launch: the shipped default price list (USD cents) exists after
`migrate`. Created once; never changed afterwards (a price change is a new version). The values
are frozen here, as they were shipped: the platform declarations (connectors/platforms.py) may
change later, this migration must not."""

from datetime import UTC, datetime
from typing import Any

from django.db import migrations

DEFAULT_PRICE_VERSION = "default-2026-01"
DEFAULT_CURRENCY = "USD"
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


def create_default_price_version(apps: Any, schema_editor: Any) -> None:
    version_model = apps.get_model("billing", "PriceVersion")
    price_model = apps.get_model("billing", "Price")
    if version_model.objects.filter(name=DEFAULT_PRICE_VERSION).exists():
        return
    version = version_model.objects.create(
        name=DEFAULT_PRICE_VERSION,
        currency=DEFAULT_CURRENCY,
        effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        note="default prices shipped with the product (USD cents)",
    )
    price_model.objects.bulk_create(
        price_model(version=version, platform=platform, component=component, amount=amount)
        for platform, components in sorted(DEFAULT_PRICES.items())
        for component, amount in sorted(components.items())
    )


class Migration(migrations.Migration):
    dependencies = [("billing", "0003_ledger_chain")]

    operations = [migrations.RunPython(create_default_price_version, migrations.RunPython.noop)]
