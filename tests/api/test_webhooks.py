"""Webhooks out: a run's end is delivered from the outbox to a tenant's endpoint, signed, with
retries and a delivery log; a local HTTP server receives them and checks the signature. The
receiver is on loopback, so these tests allow-list it (GEO_OUTBOUND_ALLOW); names are answered
by GEO_OUTBOUND_RESOLVE, never by DNS."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from api import webhooks
from api.models import DeliveryState, WebhookDelivery, WebhookEndpoint
from pipeline.runs import on_run_finished
from sampling.models import OutboxMessage, Run
from tests import world
from tests.factories import ended_run
from tests.services import QuietHandler, loopback_server

# Committed transactions: a delivery is relayed from the outbox after its run's end commits.
pytestmark = pytest.mark.django_db(transaction=True)
# A flush after each test would empty a shared world: each test builds its own.
two_tenants = world.two_tenants_per_test

SECRET = "s3cr3t-for-tests-" + "0" * 40
PUBLIC = "93.184.216.34"


@pytest.fixture(autouse=True)
def outbound(settings: Any) -> None:
    settings.GEO_OUTBOUND_ALLOW = ["127.0.0.1/32"]
    settings.GEO_OUTBOUND_RESOLVE = {"hooks.example.com": [PUBLIC]}


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
    return ended_run(tenant="hooks", review=review, finished=True)


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


def test_endpoints_must_be_https_except_to_the_allow_list(settings: Any) -> None:
    assert webhooks.check_url("https://hooks.example.com/x")
    with pytest.raises(webhooks.WebhookUrlError):
        webhooks.check_url("http://hooks.example.com/x")
    assert webhooks.check_url("http://127.0.0.1:8000/x")
    settings.GEO_OUTBOUND_ALLOW = []
    with pytest.raises(webhooks.WebhookUrlError, match="loopback"):
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


# --- outbound guard at registration and delivery (connectors/outbound.py) --------------------

INSIDE = [
    "https://127.0.0.1:5432/",
    "https://localhost:6379/",
    "https://[::1]/",
    "https://169.254.169.254/latest/meta-data/",
    "https://10.0.0.5/",
    "https://192.168.1.1/",
    "https://metadata.google.internal/",
    "https://localhost./",  # a name resolving to 127.0.0.1
    "https://0x7f000001/",
    "https://0177.0.0.1/",
    "https://" + "a" * 490 + ".example.com/",  # over 500 characters: a 400, not a 500
]


def test_the_api_refuses_urls_that_reach_inside_with_a_400_naming_the_problem(
    client_for: Any, two_tenants: Any, settings: Any
) -> None:
    settings.GEO_OUTBOUND_ALLOW = []
    client = client_for("operator")
    for url in INSIDE:
        answer = client.post("/api/v1/webhooks/", {"tenant": "alpha", "url": url}, format="json")
        assert answer.status_code == 400, (url, answer.content)
        error = answer.json()["errors"][0]
        assert error["field"] == "url" and error["message"], url
    assert not WebhookEndpoint.objects.exists()
    messages = {
        url: client.post(
            "/api/v1/webhooks/", {"tenant": "alpha", "url": url}, format="json"
        ).json()["errors"][0]["message"]
        for url in ("https://0177.0.0.1/", "https://169.254.169.254/", "https://10.0.0.5/")
    }
    assert "loopback" in messages["https://0177.0.0.1/"]
    assert "metadata" in messages["https://169.254.169.254/"]
    assert "private" in messages["https://10.0.0.5/"]
    endpoint = WebhookEndpoint.objects.create(
        tenant=two_tenants[0].tenant, url="https://hooks.example.com/geo", secret=SECRET
    )
    changed = client.patch(
        f"/api/v1/webhooks/{endpoint.pk}/", {"url": "https://[::1]/x"}, format="json"
    )
    assert changed.status_code == 400 and "loopback" in changed.json()["errors"][0]["message"]
    endpoint.refresh_from_db()
    assert endpoint.url == "https://hooks.example.com/geo"


def test_the_console_form_refuses_a_bare_metadata_address_and_inside_urls(
    two_tenants: Any, settings: Any
) -> None:
    from django.test import Client

    from tests.world import PASSWORD

    settings.GEO_OUTBOUND_ALLOW = []
    alpha, _ = two_tenants
    client = Client()
    assert client.login(username=alpha.users["operator"].get_username(), password=PASSWORD)
    for url, problem in [
        ("169.254.169.254/latest/meta-data/", "https://"),
        ("https://169.254.169.254/latest/", "metadata"),
        ("https://0x7f000001/", "loopback"),
    ]:
        page = client.post(
            "/admin/api/webhookendpoint/add/",
            {"tenant": alpha.tenant.pk, "url": url, "events": "[]", "active": "on"},
        )
        assert page.status_code == 200, url  # the form again, with its error
        assert problem in page.content.decode(), url
    assert not WebhookEndpoint.objects.exists()
    added = client.post(
        "/admin/api/webhookendpoint/add/",
        {"tenant": alpha.tenant.pk, "url": "https://hooks.example.com/geo", "events": "[]"},
    )
    assert added.status_code == 302 and WebhookEndpoint.objects.get().secret


def test_a_name_that_turns_inside_after_registration_is_refused_at_delivery(
    receiver: tuple[Receiver, str], settings: Any
) -> None:
    state, _ = receiver
    run = _finished_run(settings, review=False)
    url = webhooks.check_url("https://hooks.example.com/geo")  # public when registered
    WebhookEndpoint.objects.create(tenant=run.tenant, url=url, secret=SECRET)
    on_run_finished(run_id=run.pk)
    delivery = WebhookDelivery.objects.get()
    settings.GEO_OUTBOUND_RESOLVE = {"hooks.example.com": ["127.0.0.1"]}  # DNS rebinding
    settings.GEO_OUTBOUND_ALLOW = []
    assert webhooks.deliver(delivery_id=delivery.pk) == 5.0
    delivery.refresh_from_db()
    assert delivery.log[0]["status"] is None
    assert delivery.log[0]["error"] == "refused: the host resolves to a loopback address"
    assert state.received == []


def test_delivery_connects_to_the_checked_address_and_keeps_the_host_name(
    receiver: tuple[Receiver, str], settings: Any
) -> None:
    state, url = receiver
    port = url.split(":")[2].split("/")[0]
    settings.GEO_OUTBOUND_RESOLVE = {"receiver.test": ["127.0.0.1"]}
    settings.GEO_OUTBOUND_ALLOW = ["receiver.test"]
    run = _finished_run(settings, review=False)
    WebhookEndpoint.objects.create(
        tenant=run.tenant, url=f"http://receiver.test:{port}/hook?k=1", secret=SECRET
    )
    on_run_finished(run_id=run.pk)
    assert webhooks.deliver(delivery_id=WebhookDelivery.objects.get().pk) is None
    assert state.received[0]["headers"]["Host"] == f"receiver.test:{port}"


def test_redirects_are_not_followed(settings: Any) -> None:
    hits: list[str] = []

    class Redirecting(QuietHandler):
        def do_POST(self) -> None:
            hits.append(self.path)
            self.read_body()
            self.send_response(307)
            self.send_header("Location", "http://127.0.0.1:9/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()

    run = _finished_run(settings, review=False)
    with loopback_server(Redirecting, threaded=False) as base:
        WebhookEndpoint.objects.create(tenant=run.tenant, url=f"{base}/hook", secret=SECRET)
        on_run_finished(run_id=run.pk)
        delivery = WebhookDelivery.objects.get()
        assert webhooks.deliver(delivery_id=delivery.pk) == 5.0
    delivery.refresh_from_db()
    assert hits == ["/hook"] and delivery.log[0]["status"] == 307
    assert delivery.state == DeliveryState.PENDING


def test_the_delivery_log_does_not_tell_closed_silent_and_non_tls_ports_apart(
    settings: Any,
) -> None:
    settings.GEO_WEBHOOK_TIMEOUT_SECONDS = 0.5
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # accepts the connection, never answers
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, not listening: refused

    class Plain(QuietHandler):
        def do_POST(self) -> None:
            self.reply(204)

    run = _finished_run(settings, review=False)
    errors = []
    with loopback_server(Plain) as plain:
        plain_port = plain.rsplit(":", 1)[1]
        for url in (
            f"https://127.0.0.1:{closed.getsockname()[1]}/",
            f"https://127.0.0.1:{silent.getsockname()[1]}/",
            f"https://127.0.0.1:{plain_port}/",  # open, but not TLS
        ):
            WebhookEndpoint.objects.all().delete()
            WebhookEndpoint.objects.create(tenant=run.tenant, url=url, secret=SECRET)
            WebhookDelivery.objects.all().delete()
            on_run_finished(run_id=run.pk)
            delivery = WebhookDelivery.objects.get()
            webhooks.deliver(delivery_id=delivery.pk)
            delivery.refresh_from_db()
            errors.append((delivery.log[0]["status"], delivery.log[0]["error"]))
    silent.close()
    closed.close()
    assert errors == [(None, "connection failed")] * 3


# --- the signature and its timestamp ---------------------------------------------------------


def test_a_signature_outside_the_tolerance_window_does_not_verify() -> None:
    body = b'{"event": "run.finished"}'
    sent_at = 1_800_000_000
    signature = webhooks.sign(SECRET, sent_at, body)
    assert webhooks.verify(SECRET, str(sent_at), body, signature, now=sent_at + 299)
    assert not webhooks.verify(SECRET, str(sent_at), body, signature, now=sent_at + 301)
    assert not webhooks.verify(SECRET, str(sent_at), body, signature, now=sent_at - 301)
    assert not webhooks.verify(SECRET, str(sent_at + 1), body, signature, now=sent_at)
    assert not webhooks.verify(SECRET, "soon", body, signature, now=sent_at)


# --- the sweep -------------------------------------------------------------------------------


def test_the_dispatcher_sweep_sends_again_a_delivery_whose_message_was_lost(
    settings: Any,
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from pipeline.sweeps import registered_sweeps, run_sweeps

    assert registered_sweeps()["api.webhook_deliveries"] is webhooks.sweep_stuck_deliveries
    run = _finished_run(settings, review=True)
    WebhookEndpoint.objects.create(
        tenant=run.tenant, url="https://hooks.example.com/", secret=SECRET
    )
    on_run_finished(run_id=run.pk)
    OutboxMessage.objects.filter(task=webhooks.TASK).update(sent_at=timezone.now())  # "relayed"
    lost, fresh = WebhookDelivery.objects.order_by("event")
    assert run_sweeps()["api.webhook_deliveries"] == 0  # nothing is late yet
    WebhookDelivery.objects.filter(pk=lost.pk).update(
        created_at=timezone.now() - timedelta(minutes=35)
    )
    assert run_sweeps()["api.webhook_deliveries"] == 1
    unsent = OutboxMessage.objects.filter(task=webhooks.TASK, sent_at=None)
    assert [m.payload["delivery_id"] for m in unsent] == [lost.pk]
    assert run_sweeps()["api.webhook_deliveries"] == 0  # claimed: left alone for a while
    WebhookDelivery.objects.filter(pk=fresh.pk).update(
        state=DeliveryState.DELIVERED, created_at=timezone.now() - timedelta(hours=1)
    )
    assert run_sweeps()["api.webhook_deliveries"] == 0  # a finished delivery is never swept


def test_a_retry_whose_message_was_lost_is_swept_once_past_its_due_time(
    settings: Any,
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    run = _finished_run(settings, review=False)
    WebhookEndpoint.objects.create(tenant=run.tenant, url="http://127.0.0.1:9/", secret=SECRET)
    on_run_finished(run_id=run.pk)
    delivery = WebhookDelivery.objects.get()
    assert webhooks.deliver(delivery_id=delivery.pk) == 5.0
    delivery.refresh_from_db()
    assert delivery.next_attempt_at is not None and delivery.attempts == 1
    assert webhooks.sweep_stuck_deliveries() == 0
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        next_attempt_at=timezone.now() - timedelta(minutes=10)
    )
    assert webhooks.sweep_stuck_deliveries() == 1


# --- the rest of an endpoint's life, in the API --------------------------------------------


def test_operators_read_change_deactivate_rotate_and_delete_their_endpoints(
    client_for: Any, two_tenants: Any
) -> None:
    alpha, bravo = two_tenants
    client = client_for("operator")
    ours = WebhookEndpoint.objects.create(
        tenant=alpha.tenant, url="https://hooks.example.com/a", secret=SECRET
    )
    theirs = WebhookEndpoint.objects.create(
        tenant=bravo.tenant, url="https://hooks.example.com/b", secret=SECRET
    )
    path = f"/api/v1/webhooks/{ours.pk}/"
    read = client.get(path)
    assert read.status_code == 200 and read.json()["url"] == ours.url
    assert "secret" not in read.json()
    assert client.get(f"/api/v1/webhooks/{theirs.pk}/").status_code == 404
    assert (
        client.patch(f"/api/v1/webhooks/{theirs.pk}/", {"active": False}, format="json").status_code
        == 404
    )

    changed = client.patch(path, {"active": False, "events": ["run.finished"]}, format="json")
    assert changed.status_code == 200 and changed.json()["active"] is False
    ours.refresh_from_db()
    assert not ours.active and not ours.wants("run.finished")

    rotated = client.post(f"{path}rotate-secret")
    assert rotated.status_code == 200
    ours.refresh_from_db()
    assert rotated.json()["secret"] == ours.secret != SECRET and len(ours.secret) == 64

    analyst = client_for("analyst")
    assert analyst.get(path).status_code == 403
    assert analyst.delete(path).status_code == 403
    assert client.delete(f"/api/v1/webhooks/{theirs.pk}/").status_code == 404
    assert client.delete(path).status_code == 204
    assert list(WebhookEndpoint.objects.values_list("pk", flat=True)) == [theirs.pk]


def test_operators_list_deliveries_and_redeliver_a_finished_one(
    client_for: Any, two_tenants: Any
) -> None:
    alpha, _ = two_tenants
    client = client_for("operator")
    run = Run.objects.filter(tenant=alpha.tenant).first()
    assert run is not None
    ours = WebhookEndpoint.objects.create(
        tenant=alpha.tenant, url="https://hooks.example.com/a", secret=SECRET
    )
    delivery = WebhookDelivery.objects.create(
        endpoint=ours, event="run.finished", run=run, dedupe_key="k1", payload={},
        state=DeliveryState.FAILED, attempts=8, log=[{"attempt": 8, "status": None}],
    )  # fmt: skip
    listed = client.get(f"/api/v1/webhooks/{ours.pk}/deliveries/")
    assert listed.status_code == 200
    assert [d["id"] for d in listed.json()["results"]] == [delivery.pk]
    assert (
        client_for("operator", 1).get(f"/api/v1/webhooks/{ours.pk}/deliveries/").status_code == 404
    )

    again = f"/api/v1/webhooks/{ours.pk}/deliveries/{delivery.pk}/redeliver"
    answer = client.post(again)
    assert answer.status_code == 202, answer.content
    assert (answer.json()["state"], answer.json()["attempts"]) == ("pending", 0)
    assert answer.json()["redeliveries"] == 1
    message = OutboxMessage.objects.get(task=webhooks.TASK, sent_at=None)
    assert message.payload == {"delivery_id": delivery.pk}
    assert client.post(again).status_code == 409  # pending: its attempts are under way
    assert client_for("analyst").post(again).status_code == 403
    assert client_for("operator", 1).post(again).status_code == 404


def test_the_console_actions_deactivate_rotate_and_redeliver(two_tenants: Any) -> None:
    from django.test import Client

    from tests.world import PASSWORD

    alpha, bravo = two_tenants
    ours = WebhookEndpoint.objects.create(
        tenant=alpha.tenant, url="https://hooks.example.com/a", secret=SECRET
    )
    theirs = WebhookEndpoint.objects.create(
        tenant=bravo.tenant, url="https://hooks.example.com/b", secret=SECRET
    )
    client = Client()
    assert client.login(username=alpha.users["operator"].get_username(), password=PASSWORD)
    changelist = "/admin/api/webhookendpoint/"
    for action in ("deactivate", "rotate_secrets"):
        answer = client.post(
            changelist, {"action": action, "_selected_action": [ours.pk, theirs.pk]}
        )
        assert answer.status_code == 302, action
    ours.refresh_from_db()
    theirs.refresh_from_db()
    assert not ours.active and ours.secret != SECRET
    assert theirs.active and theirs.secret == SECRET  # another tenant's row is untouched

    run = Run.objects.filter(tenant=alpha.tenant).first()
    assert run is not None
    delivery = WebhookDelivery.objects.create(
        endpoint=ours, event="run.finished", run=run, dedupe_key="k2", payload={},
        state=DeliveryState.DELIVERED, attempts=1,
    )  # fmt: skip
    answer = client.post(
        "/admin/api/webhookdelivery/",
        {"action": "redeliver", "_selected_action": [delivery.pk]},
    )
    assert answer.status_code == 302
    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.PENDING and delivery.redeliveries == 1
