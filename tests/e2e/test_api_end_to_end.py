"""A campaign driven through the API alone: created, previewed, launched, followed to its end
(real Celery worker, simulator over HTTP), its report downloaded, and its `run.finished`
webhook received and verified on a local server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from api import webhooks
from api.models import WebhookEndpoint
from tenancy.services import grant_role
from tests.api.conftest import token_client
from tests.conftest import BASE_CAMPAIGN, ensure_tenant, fund_tenant
from tests.dispatching import tick_until
from tests.services import QuietHandler, loopback_server

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SECRET = "e2e-webhook-secret-" + "1" * 40


@pytest.fixture
def hook_server() -> Iterator[tuple[list[dict[str, Any]], str]]:
    received: list[dict[str, Any]] = []

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            received.append({"headers": dict(self.headers), "body": self.read_body()})
            self.reply(204)

    with loopback_server(Handler, threaded=False) as url:
        yield received, f"{url}/hook"


def _operator() -> APIClient:
    tenant = fund_tenant(ensure_tenant("apiflow"))  # the API launch holds its quote
    grant_role(username="apiflow-op", tenant=tenant, role="operator", password="pw")
    return token_client(get_user_model().objects.get(username="apiflow-op"))


def _follow(client: APIClient, run_id: str, *, timeout: float = 180.0) -> dict[str, Any]:
    """The dispatcher's loop in this process; the run is observed only through the API."""

    def finished() -> dict[str, Any] | None:
        body: dict[str, Any] = client.get(f"/api/v1/runs/{run_id}/").json()
        return body if body["finished"] else None

    return tick_until(finished, timeout=timeout, owner="api-e2e")


def _wait_for_hook(received: list[dict[str, Any]], *, timeout: float = 60.0) -> None:
    # Each tick relays the outbox: run-finished, then the webhook.
    tick_until(lambda: received, timeout=timeout, owner="api-e2e")


def test_a_campaign_runs_end_to_end_through_the_api(
    simulator: Any,
    worker_env: dict[str, str],
    celery_worker: Any,
    hook_server: tuple[list[dict[str, Any]], str],
) -> None:
    received, url = hook_server
    worker_env["GEO_OUTBOUND_ALLOW"] = "127.0.0.1/32"  # the receiver is on loopback
    client = _operator()
    WebhookEndpoint.objects.create(
        tenant=ensure_tenant("apiflow"), url=url, secret=SECRET, events=["run.finished"]
    )
    celery_worker()
    data = {
        **BASE_CAMPAIGN,
        "tenant": "apiflow",
        "name": "API end to end",
        "targets": [
            {"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"},
            {"platform": "collector", "device": "desktop", "region": "us", "mode": "web_search"},
        ],
        "repeats": 1,
    }
    created = client.post("/api/v1/campaigns/", data, format="json")
    assert created.status_code == 201, created.content
    campaign_id = created.json()["id"]
    preview = client.post(f"/api/v1/campaigns/{campaign_id}/preview").json()
    assert preview["samples"] == 4 and preview["preview_token"]
    launch = client.post(
        f"/api/v1/campaigns/{campaign_id}/launch",
        {"preview_token": preview["preview_token"]},
        format="json",
        HTTP_IDEMPOTENCY_KEY="e2e-launch-1",
    )
    assert launch.status_code == 201, launch.content
    run_id = launch.json()["run_id"]

    status = _follow(client, run_id)
    assert status["finished"] and status["planned"] == 4
    assert status["succeeded"] + status["failed"] + status["invalid"] + status["review"] == 4
    assert status["outcome"] == "all_succeeded"

    samples = client.get(f"/api/v1/runs/{run_id}/samples/").json()["results"]
    assert len(samples) == 4 and all(s["layers"]["queue"] == "done" for s in samples)
    report = client.get(f"/api/v1/runs/{run_id}/report", {"format": "json"})
    assert report.status_code == 200, report.content[:500]
    assert report.json()["run_id"] == run_id
    assert client.get(f"/api/v1/runs/{run_id}/report", {"format": "csv"}).status_code == 200

    _wait_for_hook(received)
    assert len(received) == 1
    hit = received[0]
    assert webhooks.verify(
        SECRET, hit["headers"]["X-Geo-Timestamp"], hit["body"], hit["headers"]["X-Geo-Signature"]
    )
    payload = json.loads(hit["body"])
    assert (payload["event"], payload["run_id"]) == ("run.finished", run_id)
