from __future__ import annotations

import pytest

from billing.models import PriceVersion
from billing.services import NoActivePrice, create_price_version
from sampling.models import Run
from tests.billing.conftest import COLLECTOR, launch


@pytest.mark.django_db
def test_a_default_price_version_exists_after_migrate() -> None:
    assert PriceVersion.objects.filter(name="default-2026-01").exists()


@pytest.mark.django_db
def test_after_migrate_the_shipped_list_in_effect_prices_every_declared_platform() -> None:
    """A platform added later (the surfaces, grok) is priced by a new version, never by changing
    the old one (billing/migrations/0009_consumer_surface_prices.py, 0010_grok_prices.py)."""
    from billing.services import active_price_version
    from connectors.platforms import PLATFORMS

    active = active_price_version()
    priced = set(active.prices.filter(component="base").values_list("platform", flat=True))
    assert priced == set(PLATFORMS)
    assert active.prices.get(platform="grok", component="base").amount == 5
    shipped = PriceVersion.objects.get(name="default-2026-01")
    assert not shipped.prices.filter(platform="grok").exists()


@pytest.mark.django_db
def test_without_a_price_for_the_platform_the_launch_is_refused_and_rolled_back() -> None:
    create_price_version(name="no-collector", currency="USD", prices={"openai": {"base": 5}})
    with pytest.raises(NoActivePrice, match="no base price for platform"):
        launch(questions=1, targets=[COLLECTOR])
    assert not Run.objects.exists()
