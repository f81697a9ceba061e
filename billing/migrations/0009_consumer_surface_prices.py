"""The consumer surfaces (chatgpt_web, google_ai_overview, google_ai_mode, copilot_web,
gemini_web, perplexity_web; connectors/platforms.py) get sample prices, in a new version
(billing/price_additions.py). Prices frozen here as shipped (USD cents)."""

from typing import Any

from django.db import migrations

from billing.price_additions import add_platform_prices

SURFACE_PRICES: dict[str, dict[str, int]] = {
    "chatgpt_web": {"base": 60, "deep_thinking": 20, "screenshot": 10},
    "google_ai_overview": {"base": 40, "deep_thinking": 20, "screenshot": 10},
    "google_ai_mode": {"base": 40, "deep_thinking": 20, "screenshot": 10},
    "copilot_web": {"base": 60, "deep_thinking": 20, "screenshot": 10},
    "gemini_web": {"base": 60, "deep_thinking": 20, "screenshot": 10},
    "perplexity_web": {"base": 60, "deep_thinking": 20, "screenshot": 10},
}


def add_surface_prices(apps: Any, schema_editor: Any) -> None:
    add_platform_prices(
        apps,
        name="surfaces-2026-12",
        prices=SURFACE_PRICES,
        note="the consumer surfaces' prices (USD cents)",
    )


class Migration(migrations.Migration):
    dependencies = [("billing", "0008_statement_imports")]

    operations = [migrations.RunPython(add_surface_prices, migrations.RunPython.noop)]
