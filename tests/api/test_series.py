"""GET /api/v1/campaigns/{id}/series: a campaign's metric over time, in segments, through the
caller's scope (operators and analysts; another tenant's campaign is a 404)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from analysis.reports import build_run_report
from monitoring.services import write_series
from tests.world import World

pytestmark = pytest.mark.django_db

Client = Callable[..., APIClient]


def _url(world: World, index: int = 0) -> str:
    return f"/api/v1/campaigns/{world[index].run.campaign_id}/series"


@pytest.fixture
def written(two_tenants: World) -> World:
    for world in two_tenants:
        write_series(run_id=world.run.pk)
    return two_tenants


def test_operators_and_analysts_read_the_brands_visibility_per_run(
    written: World, client_for: Client
) -> None:
    alpha = written[0]
    report = build_run_report(run_id=alpha.run.pk, with_trend=False)
    for role in ("operator", "analyst"):
        response = client_for(role).get(_url(written))
        assert response.status_code == 200, response.content
        body = response.json()
        assert body["metric"] == "visibility" and body["entity"] == report.brand
        (point,) = body["points"]
        assert point["run_id"] == str(alpha.run.pk) and point["segment"] == 0
        mentioned = report.overall.entity_mention_rates[report.brand].successes
        assert (point["hits"], point["n"]) == (mentioned, report.overall.counts.succeeded)
        assert point["low"] <= point["rate"] <= point["high"]
        assert body["segments"][0]["runs"] == 1 and body["segments"][0]["changes"] == []


def test_filters_narrow_the_rows_and_a_bad_one_is_a_400(written: World, client_for: Client) -> None:
    client = client_for("operator")
    report = build_run_report(run_id=written[0].run.pk, with_trend=False)
    for metrics in report.by_platform:
        body = client.get(_url(written), {"platform": metrics.key, "metric": "mention_rate"}).json()
        (point,) = body["points"]
        assert point["n"] == metrics.counts.planned
        assert point["hits"] == metrics.mention_rate.successes
    assert client.get(_url(written), {"platform": "nowhere"}).json()["points"] == []
    assert client.get(_url(written), {"to": "2000-01-01"}).json()["points"] == []
    assert len(client.get(_url(written), {"from": "2000-01-01"}).json()["points"]) == 1
    bad = client.get(_url(written), {"metric": "luck", "from": "yesterday"})
    assert bad.status_code == 400
    fields = {e["field"] for e in bad.json()["errors"]}
    assert {"metric", "from"} <= fields


def test_another_tenants_campaign_is_a_404_and_finance_reads_none(
    written: World, client_for: Client
) -> None:
    assert client_for("operator").get(_url(written, 1)).status_code == 404
    assert client_for("analyst").get(_url(written, 1)).status_code == 404
    assert client_for("finance").get(_url(written)).status_code in (403, 404)
    assert client_for("finance").get(_url(written, 1)).status_code == 404


def test_a_campaigns_topics_are_read_and_replaced_through_the_api(
    written: World, client_for: Client
) -> None:
    client = client_for("operator")
    url = f"/api/v1/campaigns/{written[0].run.campaign_id}/"
    questions = client.get(url).json()["questions"]
    assert "topics" not in client.get(url).json()
    response = client.patch(url, {"topics": {questions[0]: ["pricing"]}}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["topics"] == {questions[0]: ["pricing"]}
    # a new question list keeps the topics of the questions it keeps
    response = client.patch(url, {"questions": [questions[0], "A new question?"]}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["topics"] == {questions[0]: ["pricing"]}
    response = client.patch(url, {"questions": ["Only a new one?"]}, format="json")
    assert response.status_code == 200, response.content
    assert "topics" not in response.json()
