"""Prices for platforms added after a deployment has a price list (billing/price_additions.py,
the data migrations 0009 and 0010): a new version keeps every current price, the operator's
own included, and adds only the platforms it lacks; a list in another currency is left alone."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.apps import apps
from django.utils import timezone

from billing.models import Price, PriceVersion
from billing.price_additions import add_platform_prices
from billing.services import active_price_version

pytestmark = pytest.mark.django_db

NEW = {"newbot": {"base": 7, "deep_thinking": 3, "screenshot": 10}}


def _own_list(currency: str = "USD", **prices: int) -> PriceVersion:
    version = PriceVersion.objects.create(
        name=f"operators-own-{currency}",
        currency=currency,
        effective_from=timezone.now() - timedelta(seconds=1),
    )
    Price.objects.bulk_create(
        Price(version=version, platform=platform, component="base", amount=amount)
        for platform, amount in prices.items()
    )
    return version


def _prices(version: PriceVersion) -> dict[tuple[str, str], int]:
    return {(p.platform, p.component): p.amount for p in version.prices.all()}


def test_a_new_platform_comes_in_a_new_version_that_keeps_the_operators_own_prices() -> None:
    own = _own_list(openai=99)

    add_platform_prices(apps, name="newbot-2026-12", prices=NEW, note="newbot's prices")

    added = active_price_version()
    assert added.name == "newbot-2026-12" and added.note == f"{own.name} and newbot's prices"
    assert _prices(added) == {
        ("openai", "base"): 99,
        ("newbot", "base"): 7,
        ("newbot", "deep_thinking"): 3,
        ("newbot", "screenshot"): 10,
    }
    assert _prices(own) == {("openai", "base"): 99}  # the old version is as it was


def test_a_platform_the_current_list_prices_already_is_not_priced_again() -> None:
    own = _own_list(openai=99, newbot=1)

    add_platform_prices(apps, name="newbot-2026-12", prices=NEW, note="newbot's prices")

    assert active_price_version() == own
    assert not PriceVersion.objects.filter(name="newbot-2026-12").exists()


def test_a_list_in_another_currency_is_left_to_its_operator() -> None:
    own = _own_list("EUR", openai=90)

    add_platform_prices(apps, name="newbot-2026-12", prices=NEW, note="newbot's prices")

    assert active_price_version() == own


def test_running_the_migration_again_adds_nothing() -> None:
    _own_list(openai=99)
    add_platform_prices(apps, name="newbot-2026-12", prices=NEW, note="newbot's prices")
    versions = PriceVersion.objects.count()

    add_platform_prices(apps, name="newbot-2026-12", prices=NEW, note="newbot's prices")

    assert PriceVersion.objects.count() == versions
