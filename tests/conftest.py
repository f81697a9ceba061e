"""Shared fixtures. Tests run against PostgreSQL and Redis (see Makefile `test`)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

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
