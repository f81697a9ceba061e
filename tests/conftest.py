"""Shared fixtures. Tests run against PostgreSQL and Redis (see Makefile `test`)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from django.db.models.signals import post_save

BASE_CAMPAIGN: dict[str, Any] = {
    "tenant": "acme",
    "name": "Q4 visibility",
    "brand": {"name": "Acme", "aliases": ["ACME", "艾克米"], "domains": ["acme.com"]},
    "competitors": [
        {"name": "Globex", "aliases": ["环球"], "domains": ["globex.com"]},
        {"name": "Initech", "aliases": [], "domains": ["initech.com"]},
    ],
    "questions": ["Which CRM is best for a small team?", "哪个CRM最适合小团队？"],
    "targets": [{"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"}],
    "repeats": 2,
    "screenshot_policy": "optional",
}


@pytest.fixture
def campaign_data() -> dict[str, Any]:
    return copy.deepcopy(BASE_CAMPAIGN)


def make_campaign_data(
    *,
    questions: int,
    targets: list[dict[str, str]],
    repeats: int,
    tenant: str = "acme",
    name: str = "plan",
) -> dict[str, Any]:
    data = copy.deepcopy(BASE_CAMPAIGN)
    data.update(
        tenant=tenant,
        name=name,
        questions=[f"Question number {i}: which vendor is best?" for i in range(questions)],
        targets=targets,
        repeats=repeats,
    )
    return data


def ensure_tenant(slug: str) -> Any:
    """Create the tenant a campaign file names, as an administrator would before launching:
    launching never creates tenants (sampling.services.save_campaign refuses unknown ones)."""
    from sampling.models import Tenant

    tenant, _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": slug})
    return tenant


def spec_with_tenant(data: dict[str, Any], **options: Any) -> Any:
    """`parse_campaign_spec(data)` after creating the tenant the data names."""
    from sampling.planning import parse_campaign_spec

    spec = parse_campaign_spec(data, **options)
    ensure_tenant(spec.tenant)
    return spec


TEST_FUNDS = 10**9  # minor units: no sampling test should fail for lack of credit


def _fund_new_tenant(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    from billing.services import ensure_default_price_version, top_up

    if created:
        version = ensure_default_price_version()
        top_up(
            tenant=instance,
            amount=TEST_FUNDS,
            currency=version.currency,
            idempotency_key="test-funds",
        )


@pytest.fixture(autouse=True)
def funded_tenants() -> Iterator[None]:
    """Launching a run holds its quote, so every tenant a test creates gets a price list and
    credit, as an operator would set up. Billing's own tests override this to start empty."""
    post_save.connect(_fund_new_tenant, sender="sampling.Tenant", dispatch_uid="test-funds")
    yield
    post_save.disconnect(sender="sampling.Tenant", dispatch_uid="test-funds")
