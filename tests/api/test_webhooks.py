"""Webhooks out: a run's end is delivered from the outbox to a tenant's endpoint, signed, with
retries and a delivery log; a local HTTP server receives them and checks the signature."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from api import webhooks
from api.models import DeliveryState, WebhookDelivery, WebhookEndpoint
from pipeline.runs import on_run_finished
from sampling.models import OutboxMessage, Run
from tests import world
from tests.conftest import launch_funded, make_campaign_data
from tests.services import QuietHandler, loopback_server

# Committed transactions: a delivery is relayed from the outbox after its run's end commits.
pytestmark = pytest.mark.django_db(transaction=True)
# A flush after each test would empty a shared world: each test builds its own.
two_tenants = world.two_tenants_per_test

SECRET = "s3cr3t-for-tests-" + "0" * 40


class Receiver:
    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.fail_next = 0


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    state = Receiver()

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            state.received.append({"headers": dict(self.headers), "body": self.read_body()})
            status = 500 if state.fail_next > 0 else 204
            state.fail_next -= 1
            self.reply(status)

    with loopback_server(Handler, threaded=False) as url:
        yield state, f"{url}/hook"


def _finished_run(settings: Any, review: bool) -> Run:
    settings.GEO_WEBHOOK_BACKOFF_SECONDS = 5
    data = make_campaign_data(
        questions=1,
        targets=[{"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"}],
        repeats=1,
        tenant="hooks",
    )
    run = launch_funded(data)
    run.samples.update(
        queue_state="done",
        collection_state="completed",
        submission_state="accepted",
        analysis_state="review" if review else "accepted",
        validity="valid",
    )
    Run.objects.filter(pk=run.pk).update(finished_at=run.created_at)
    return run


def test_run_end_is_delivered_signed_from_the_outbox(
    receiver: tuple[Receiver, str], settings: Any
) -> None:
    state, url = receiver
    run = _finished_run(settings, review=True)
    WebhookEndpoint.objects.create(tenant=run.tenant, url=url, secret=SECRET)
    on_run_finished(run_id=run.pk)
    on_run_finished(run_id=run.pk)  # delivered at least once: the events are recorded once
    deliveries = list(WebhookDelivery.objects.order_by("event"))
    assert [d.event for d in deliveries] == ["run.finished", "run.needs_review"]
    messages = OutboxMessage.objects.filter(task=webhooks.TASK)
    assert sorted(m.payload["delivery_id"] for m in messages) == [d.pk for d in deliveries]
    assert SECRET not in json.dumps([m.payload for m in messages])

    for delivery in deliveries:
        assert webhooks.deliver(delivery_id=delivery.pk) is None
    assert len(state.received) == 2
    for hit in state.received:
        headers, body = hit["headers"], hit["body"]
        assert webhooks.verify(SECRET, headers["X-Geo-Timestamp"], body, headers["X-Geo-Signature"])
        assert not webhooks.verify(
            "other", headers["X-Geo-Timestamp"], body, headers["X-Geo-Signature"]
        )
        payload = json.loads(body)
        assert payload["event"] == headers["X-Geo-Event"] and payload["run_id"] == str(run.pk)
        assert payload["review"] == 1 and SECRET not in body.decode()
    delivered = WebhookDelivery.objects.get(event="run.finished")
    assert delivered.state == DeliveryState.DELIVERED and delivered.log[0]["status"] == 204


def test_failures_are_retried_with_backoff_and_logged(
    receiver: tuple[Receiver, str], settings: Any
) -> None:
    state, url = receiver
    state.fail_next = 2
    run = _finished_run(settings, review=False)
    WebhookEndpoint.objects.create(tenant=run.tenant, url=url, secret=SECRET)
    on_run_finished(run_id=run.pk)
    delivery = WebhookDelivery.objects.get()
    assert delivery.event == "run.finished"  # nothing waits for review
    delays = [webhooks.deliver(delivery_id=delivery.pk) for _ in range(3)]
    assert delays == [5.0, 10.0, None]
    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.DELIVERED and delivery.attempts == 3
    assert [entry["status"] for entry in delivery.log] == [500, 500, 204]
    ids = {hit["headers"]["X-Geo-Delivery"] for hit in state.received}
    assert ids == {str(delivery.pk)}  # the same id on every retry: receivers dedupe on it


def test_a_delivery_fails_for_good_after_the_last_attempt(settings: Any) -> None:
    settings.GEO_WEBHOOK_MAX_ATTEMPTS = 2
    run = _finished_run(settings, review=False)
    WebhookEndpoint.objects.create(tenant=run.tenant, url="http://127.0.0.1:9/", secret=SECRET)
    on_run_finished(run_id=run.pk)
    delivery = WebhookDelivery.objects.get()
    assert webhooks.deliver(delivery_id=delivery.pk) == 5.0
    assert webhooks.deliver(delivery_id=delivery.pk) is None
    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.FAILED
    assert [entry["status"] for entry in delivery.log] == [None, None]


def test_endpoints_must_be_https_except_loopback_in_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    assert webhooks.check_url("https://hooks.example.com/x")
    with pytest.raises(webhooks.WebhookUrlError):
        webhooks.check_url("http://hooks.example.com/x")
    monkeypatch.setenv("GEO_ALLOW_HTTP", "0")
    with pytest.raises(webhooks.WebhookUrlError):
        webhooks.check_url("http://127.0.0.1:8000/x")


def test_operators_register_endpoints_for_their_tenants_only(
    client_for: Any, two_tenants: Any
) -> None:
    client = client_for("operator")
    body = {"tenant": "alpha", "url": "https://hooks.example.com/geo", "events": ["run.finished"]}
    created = client.post("/api/v1/webhooks/", body, format="json")
    assert created.status_code == 201
    endpoint = WebhookEndpoint.objects.get(pk=created.json()["id"])
    assert created.json()["secret"] == endpoint.secret and len(endpoint.secret) == 64
    listed = client.get("/api/v1/webhooks/").json()["results"]
    assert [e["id"] for e in listed] == [endpoint.pk] and "secret" not in listed[0]
    other = client.post("/api/v1/webhooks/", {**body, "tenant": "zzbravo"}, format="json")
    assert other.status_code == 400 and other.json()["errors"][0]["field"] == "tenant"
    plain = client.post("/api/v1/webhooks/", {**body, "url": "http://x.example/"}, format="json")
    assert plain.status_code == 400 and plain.json()["errors"][0]["field"] == "url"
    assert client_for("analyst").get("/api/v1/webhooks/").status_code == 403
    assert client_for("operator", 1).get("/api/v1/webhooks/").json()["results"] == []


def test_the_console_shows_endpoints_scoped_by_tenant(two_tenants: Any) -> None:
    from django.test import Client

    from tests.world import PASSWORD

    alpha, bravo = two_tenants
    theirs = WebhookEndpoint.objects.create(
        tenant=bravo.tenant, url="https://bravo.example/hook", secret=SECRET
    )
    ours = WebhookEndpoint.objects.create(
        tenant=alpha.tenant, url="https://alpha.example/hook", secret=SECRET
    )
    client = Client()
    assert client.login(username=alpha.users["operator"].get_username(), password=PASSWORD)
    page = client.get("/admin/api/webhookendpoint/").content.decode()
    assert "alpha.example" in page and "bravo.example" not in page
    assert client.get(f"/admin/api/webhookendpoint/{theirs.pk}/change/").status_code == 404
    assert client.get(f"/admin/api/webhookendpoint/{ours.pk}/change/").status_code == 200
