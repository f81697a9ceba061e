"""Alerts end to end (real Celery worker, simulator over HTTP, PostgreSQL, Redis): the
simulator is told to lower the brand's mention rate between two runs (`POST /_sim/entities`,
its `mention_rate`), the series rows are written after each run's end, the campaign's
visibility-drop rule fires once, and the alert reaches a local SMTP server (aiosmtpd), a
local Slack-shaped receiver and a signed `alert.fired` webhook; a third run as low notifies
nobody again, and a recovered rate resolves the alert."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from email import message_from_bytes
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from django.contrib.auth import get_user_model

from alerts.models import Alert, AlertDelivery, AlertState, AlertSubscription, DeliveryState
from alerts.services import create_rule
from api import webhooks
from api.models import WebhookDelivery, WebhookEndpoint
from pipeline.launch import launch_run
from sampling.models import OutboxMessage, Run
from sampling.services import save_campaign
from tenancy.services import grant_role
from tests.conftest import BASE_CAMPAIGN, spec_with_tenant
from tests.dispatching import tick_until
from tests.e2e.conftest import drive_until_settled
from tests.services import QuietHandler, loopback_server

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SECRET = "e2e-alert-secret-" + "2" * 40
SLACK_PATH = "/services/T0E2E/B0E2E/e2eSlackToken"
QUESTIONS = [f"Question {i}: which CRM is best for a small team?" for i in range(20)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def smtp() -> Iterator[tuple[list[Any], int]]:
    received: list[Any] = []

    class Handler:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
            received.append(message_from_bytes(envelope.content))
            return "250 Message accepted for delivery"

    port = _free_port()
    controller = Controller(Handler(), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield received, port
    finally:
        controller.stop()


@pytest.fixture
def receivers() -> Iterator[tuple[list[dict[str, Any]], list[dict[str, Any]], str]]:
    """One loopback server: Slack's incoming-webhook path answers "ok"; /hook the signed ones."""
    slack: list[dict[str, Any]] = []
    hooks: list[dict[str, Any]] = []

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            body = self.read_body()
            if self.path == SLACK_PATH:
                slack.append(json.loads(body))
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(b"ok")
            else:
                hooks.append({"headers": dict(self.headers), "body": body})
                self.reply(204)

    with loopback_server(Handler) as url:
        yield slack, hooks, url


def _entities(rate: float) -> list[dict[str, Any]]:
    """The brand at `rate`; the competitors never named, so no answer names the brand as the
    partner of a competitor's comparison: the brand's own rate is what moves."""
    silent = [{**c, "mention_rate": 0.0} for c in BASE_CAMPAIGN["competitors"]]
    return [{**BASE_CAMPAIGN["brand"], "mention_rate": rate}, *silent]


def _run(simulator: Any, campaign: Any, *, rate: float) -> Run:
    simulator.register_entities(*_entities(rate), replace=True)
    run = launch_run(campaign=campaign)
    drive_until_settled(run.pk)

    def evaluated() -> bool:
        return OutboxMessage.objects.filter(
            task="alerts.evaluate_run", payload__run_id=str(run.pk), completed_at__isnull=False
        ).exists()

    tick_until(evaluated, timeout=120, describe=lambda: f"run {run.pk} not evaluated yet")
    return run


def _all_sent() -> bool:
    pending = AlertDelivery.objects.filter(state=DeliveryState.PENDING).exists()
    hooks = WebhookDelivery.objects.filter(event="alert.fired", state="pending").exists()
    return not pending and not hooks


def test_a_visibility_drop_is_alerted_once_on_every_channel_and_resolves_on_recovery(
    simulator: Any,
    worker_env: dict[str, str],
    celery_worker: Any,
    smtp: tuple[list[Any], int],
    receivers: tuple[list[dict[str, Any]], list[dict[str, Any]], str],
) -> None:
    mails, smtp_port = smtp
    slack, hooks, base = receivers
    worker_env.update(
        GEO_OUTBOUND_ALLOW="127.0.0.1/32",  # the receivers are on loopback
        EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend",
        EMAIL_HOST="127.0.0.1",
        EMAIL_PORT=str(smtp_port),
        GEO_CONSOLE_BASE_URL="https://console.example",
    )
    data = {
        **BASE_CAMPAIGN,
        "tenant": "alertflow",
        "name": "Alerts end to end",
        "questions": QUESTIONS,
        "repeats": 1,
        "screenshot_policy": "none",
    }
    campaign = save_campaign(spec=spec_with_tenant(data, funded=True))
    tenant = campaign.tenant
    create_rule(campaign=campaign, kind="visibility_drop", slack_webhook_url=base + SLACK_PATH)
    WebhookEndpoint.objects.create(
        tenant=tenant, url=f"{base}/hook", secret=SECRET, events=["alert.fired"]
    )
    grant_role(username="alert-analyst", tenant=tenant, role="analyst", password="pw")
    analyst = get_user_model().objects.get(username="alert-analyst")
    analyst.email = "analyst@alertflow.example"
    analyst.save(update_fields=["email"])
    AlertSubscription.objects.create(user=analyst, tenant=tenant, immediate=True)
    celery_worker()

    _run(simulator, campaign, rate=1.0)  # every answer names the brand
    assert not Alert.objects.exists()  # nothing to compare with yet

    dropped = _run(simulator, campaign, rate=0.0)  # the engines stop naming it
    tick_until(_all_sent, timeout=60)
    (alert,) = Alert.objects.all()
    assert alert.condition_key == "visibility_drop:openai" and alert.state == AlertState.OPEN
    assert alert.run_id == dropped.pk
    assert (alert.details["before"]["hits"], alert.details["before"]["n"]) == (20, 20)
    assert alert.details["after"]["n"] == 20 and alert.details["after"]["hits"] <= 2
    assert alert.details["q_value"] < 0.05

    (mail,) = mails
    assert mail["To"] == "analyst@alertflow.example" and "visibility fell" in mail["Subject"]
    text = mail.get_payload(decode=True).decode()
    assert f"https://console.example/admin/sampling/sample/?run={dropped.pk}" in text
    (post,) = slack
    assert post["text"].startswith("GEO alert: visibility fell on openai")
    assert {block["type"] for block in post["blocks"]} == {"header", "section"}
    (hook,) = hooks
    headers = hook["headers"]
    assert headers["X-Geo-Event"] == "alert.fired"
    assert webhooks.verify(
        SECRET, headers["X-Geo-Timestamp"], hook["body"], headers["X-Geo-Signature"]
    )
    payload = json.loads(hook["body"])
    assert (payload["alert_id"], payload["run_id"]) == (alert.pk, str(dropped.pk))

    _run(simulator, campaign, rate=0.0)  # as low again: the open alert holds, nobody told
    tick_until(_all_sent, timeout=30)
    assert (len(mails), len(slack), len(hooks)) == (1, 1, 1)
    alert.refresh_from_db()
    assert alert.state == AlertState.OPEN and Alert.objects.count() == 1

    recovered = _run(simulator, campaign, rate=1.0)
    alert.refresh_from_db()
    assert alert.state == AlertState.RESOLVED and alert.resolved_run_id == recovered.pk
    assert (len(mails), len(slack), len(hooks)) == (1, 1, 1)
