"""Grok (connectors/platforms.py) gets sample prices, in a new version
(billing/price_additions.py), as the consumer surfaces did in 0009. Prices frozen here as
shipped (USD cents)."""

from typing import Any

from django.db import migrations

from billing.price_additions import add_platform_prices

GROK_PRICES: dict[str, int] = {"base": 5, "deep_thinking": 3, "screenshot": 10}


def add_grok_prices(apps: Any, schema_editor: Any) -> None:
    add_platform_prices(
        apps, name="grok-2026-12", prices={"grok": GROK_PRICES}, note="Grok's prices (USD cents)"
    )


class Migration(migrations.Migration):
    dependencies = [("billing", "0009_consumer_surface_prices")]

    operations = [migrations.RunPython(add_grok_prices, migrations.RunPython.noop)]
