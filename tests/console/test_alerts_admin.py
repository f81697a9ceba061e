"""The console's alert pages: operators and analysts list their tenants' alerts with the
figures and the links to the samples, and acknowledge them; another tenant's alert is a 404;
finance has no alert page."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from alerts.models import Alert, AlertState
from alerts.services import create_rule
from tests.world import TenantWorld

pytestmark = pytest.mark.django_db


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _alert(world: TenantWorld) -> Alert:
    rule = create_rule(campaign=world.run.campaign, kind="visibility_drop")
    url = f"{reverse('admin:sampling_sample_changelist')}?run={world.run.pk}&platform=openai"
    return Alert.objects.create(
        tenant=world.tenant,
        campaign=world.run.campaign,
        rule=rule,
        condition_key="visibility_drop:openai",
        run=world.run,
        summary=f"{world.marker} visibility fell on openai",
        details={
            "before": {"hits": 40, "n": 50, "rate": 0.8, "low": 0.67, "high": 0.89},
            "after": {"hits": 10, "n": 50, "rate": 0.2, "low": 0.11, "high": 0.33},
            "p_value": 1e-9,
            "q_value": 2e-9,
            "links": [{"label": "samples of the run on openai", "url": url}],
        },
    )


def test_alerts_are_listed_with_their_figures_and_acknowledged_per_tenant(
    two_tenants: tuple[TenantWorld, TenantWorld],
) -> None:
    alpha, bravo = two_tenants
    mine, theirs = _alert(alpha), _alert(bravo)
    changelist = reverse("admin:alerts_alert_changelist")
    for role in ("operator", "analyst"):
        page = _client(alpha.users[role]).get(changelist).content.decode()
        assert mine.summary in page and theirs.summary not in page
    client = _client(alpha.users["analyst"])
    detail = client.get(reverse("admin:alerts_alert_change", args=[mine.pk])).content.decode()
    assert "80.0 % (40/50, 95 % CI 67.0-89.0 %)" in detail
    assert "p = 1e-09, q = 2e-09" in detail
    assert 'name="_save"' not in detail and 'name="_continue"' not in detail  # nothing to save
    assert f"?run={alpha.run.pk}&amp;platform=openai" in detail
    assert client.get(reverse("admin:alerts_alert_change", args=[theirs.pk])).status_code == 404
    done = client.post(
        changelist,
        {"action": "acknowledge_selected", "_selected_action": [mine.pk, theirs.pk]},
    )
    assert done.status_code == 302
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert mine.state == AlertState.ACKNOWLEDGED and theirs.state == AlertState.OPEN
    assert mine.acknowledged_by == alpha.users["analyst"]
    assert _client(alpha.users["finance"]).get(changelist).status_code == 403
