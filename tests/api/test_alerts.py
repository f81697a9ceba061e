"""The alerts endpoints: a page of the caller's tenants' alerts (operators and analysts),
filtered by campaign and state; acknowledge, once; another tenant's alert is a 404; finance
reads none."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from alerts.models import Alert, AlertState
from alerts.services import create_rule
from tests.world import TenantWorld

pytestmark = pytest.mark.django_db


def _alert(world: TenantWorld, key: str = "run") -> Alert:
    rule = create_rule(campaign=world.run.campaign, kind="run_failed")
    return Alert.objects.create(
        tenant=world.tenant,
        campaign=world.run.campaign,
        rule=rule,
        condition_key=key,
        run=world.run,
        summary=f"{world.marker} run partly failed",
        details={"after": {"hits": 1, "n": 4, "rate": 0.25, "low": 0.05, "high": 0.7}},
    )


def test_the_list_holds_the_callers_tenants_alerts_only(
    two_tenants: tuple[TenantWorld, TenantWorld], client_for: Callable[..., APIClient]
) -> None:
    mine, theirs = _alert(two_tenants[0]), _alert(two_tenants[1])
    for role in ("operator", "analyst"):
        body = client_for(role).get("/api/v1/alerts/").json()
        ids = [row["id"] for row in body["results"]]
        assert mine.pk in ids and theirs.pk not in ids
        row = next(r for r in body["results"] if r["id"] == mine.pk)
        assert (row["kind"], row["state"], row["details"]["after"]["n"]) == (
            "run_failed",
            "open",
            4,
        )
    assert client_for("finance").get("/api/v1/alerts/").status_code == 403


def test_the_list_filters_by_campaign_and_state(
    two_tenants: tuple[TenantWorld, TenantWorld], client_for: Callable[..., APIClient]
) -> None:
    alert = _alert(two_tenants[0])
    client = client_for("analyst")
    campaign = two_tenants[0].run.campaign_id
    assert [
        r["id"]
        for r in client.get(f"/api/v1/alerts/?campaign={campaign}&state=open").json()["results"]
    ] == [alert.pk]
    assert client.get("/api/v1/alerts/?state=resolved").json()["results"] == []
    assert client.get("/api/v1/alerts/?state=bogus").status_code == 400


def test_an_analyst_acknowledges_an_open_alert_once(
    two_tenants: tuple[TenantWorld, TenantWorld], client_for: Callable[..., APIClient]
) -> None:
    alert = _alert(two_tenants[0])
    client = client_for("analyst")
    done = client.post(f"/api/v1/alerts/{alert.pk}/acknowledge")
    assert done.status_code == 200, done.content
    assert done.json()["state"] == "acknowledged"
    assert done.json()["acknowledged_by"] == two_tenants[0].users["analyst"].get_username()
    again = client.post(f"/api/v1/alerts/{alert.pk}/acknowledge")
    assert again.status_code == 409 and again.json()["code"] == "not_open"
    alert.refresh_from_db()
    assert alert.state == AlertState.ACKNOWLEDGED


def test_another_tenants_alert_is_a_404_and_finance_may_not_acknowledge(
    two_tenants: tuple[TenantWorld, TenantWorld], client_for: Callable[..., APIClient]
) -> None:
    theirs = _alert(two_tenants[1])
    assert client_for("operator").post(f"/api/v1/alerts/{theirs.pk}/acknowledge").status_code == 404
    mine = _alert(two_tenants[0])
    assert client_for("finance").post(f"/api/v1/alerts/{mine.pk}/acknowledge").status_code in (
        403,
        404,
    )
    theirs.refresh_from_db()
    mine.refresh_from_db()
    assert theirs.state == mine.state == AlertState.OPEN
