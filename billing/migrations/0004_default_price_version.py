"""A fresh install can launch: the shipped default price list (billing.services
DEFAULT_PRICES, USD cents) exists after `migrate`. Created once; never changed afterwards
(a price change is a new version)."""

from datetime import UTC, datetime
from typing import Any

from django.db import migrations


def create_default_price_version(apps: Any, schema_editor: Any) -> None:
    from billing.services import DEFAULT_CURRENCY, DEFAULT_PRICE_VERSION, DEFAULT_PRICES

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
