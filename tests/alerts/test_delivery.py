"""Delivering a fired alert (alerts/delivery.py, alerts/digest.py): email through Django's
email framework, Slack's incoming-webhook message, retries with backoff, the daily digest in
the subscriber's time zone outside quiet hours; no secret in a log or a delivery record."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core import mail

from alerts import delivery, digest, services
from alerts.evaluation import evaluate_run
from alerts.models import Alert, AlertDelivery, AlertSubscription, Channel, DeliveryState
from sampling.models import OutboxMessage
from tests.alerts.conftest import subscriber
from tests.services import QuietHandler, loopback_server

pytestmark = pytest.mark.django_db

HIGH = {"openai": (40, 50)}
LOW = {"openai": (10, 50)}
OPENAI = "visibility_drop:openai"
SLACK_SECRET = "T0000/B0000/sEcReTtOkEn123"


@pytest.fixture
def slack() -> Iterator[tuple[list[dict[str, Any]], str, list[int]]]:
    received: list[dict[str, Any]] = []
    statuses: list[int] = []  # what to answer, in order; then 200

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            received.append({"path": self.path, "body": json.loads(self.read_body())})
            code = statuses.pop(0) if statuses else 200
            self.send_response(code)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"ok" if code == 200 else b"invalid_payload")

    with loopback_server(Handler) as url:
        yield received, f"{url}/services/{SLACK_SECRET}", statuses


def _fired(series: Any, new_run: Any, **rule: Any) -> Alert:
    r1, r2 = new_run(), new_run()
    services.create_rule(campaign=r1.campaign, kind="visibility_drop", **rule)
    series.set(r1, HIGH)
    series.set(r2, LOW)
    evaluate_run(run_id=r2.pk)
    return Alert.objects.get(condition_key="visibility_drop:openai")


def test_an_alert_email_carries_the_figures_and_the_sample_link(
    series: Any, new_run: Any, settings: Any
) -> None:
    settings.GEO_CONSOLE_BASE_URL = "https://console.example"
    subscriber(new_run().tenant, "ana")
    alert = _fired(series, new_run)
    (email,) = AlertDelivery.objects.filter(channel=Channel.EMAIL, alert__condition_key=OPENAI)
    assert delivery.deliver(delivery_id=email.pk) is None
    (message,) = mail.outbox
    assert message.to == ["ana@example.com"] and "visibility fell on openai" in message.subject
    assert "before: 80.0 % (40/50, 95 % CI" in message.body
    assert "after: 20.0 % (10/50" in message.body and "q = " in message.body
    assert f"https://console.example/admin/sampling/sample/?run={alert.run_id}" in message.body
    email.refresh_from_db()
    assert email.state == DeliveryState.DELIVERED and email.attempts == 1
    assert delivery.deliver(delivery_id=email.pk) is None and len(mail.outbox) == 1  # once


def test_an_email_that_fails_is_retried_with_backoff_then_failed(
    series: Any, new_run: Any, settings: Any
) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", port, 2
    settings.GEO_ALERT_BACKOFF_SECONDS, settings.GEO_ALERT_MAX_ATTEMPTS = 10, 3
    subscriber(new_run().tenant, "ana")
    _fired(series, new_run)
    (email,) = AlertDelivery.objects.filter(channel=Channel.EMAIL, alert__condition_key=OPENAI)
    assert delivery.deliver(delivery_id=email.pk) == 10
    assert delivery.deliver(delivery_id=email.pk) == 20
    assert delivery.deliver(delivery_id=email.pk) is None
    email.refresh_from_db()
    assert email.state == DeliveryState.FAILED and email.attempts == 3
    assert [entry["status"] for entry in email.log] == ["email failed: ConnectionRefusedError"] * 3


def test_slack_gets_its_message_shape_and_the_url_reaches_no_log(
    series: Any,
    new_run: Any,
    settings: Any,
    slack: tuple[list[dict[str, Any]], str, list[int]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    received, url, statuses = slack
    settings.GEO_OUTBOUND_ALLOW = ["127.0.0.1/32"]
    statuses.append(500)
    caplog.set_level(logging.DEBUG)
    _fired(series, new_run, slack_webhook_url=url)
    (post,) = AlertDelivery.objects.filter(channel=Channel.SLACK, alert__condition_key=OPENAI)
    assert delivery.deliver(delivery_id=post.pk) == settings.GEO_ALERT_BACKOFF_SECONDS
    assert delivery.deliver(delivery_id=post.pk) is None
    post.refresh_from_db()
    assert post.state == DeliveryState.DELIVERED
    assert [entry["status"] for entry in post.log] == ["HTTP 500", "HTTP 200"]
    body = received[-1]["body"]
    assert received[-1]["path"] == f"/services/{SLACK_SECRET}"
    assert body["text"].startswith("GEO alert: visibility fell on openai")
    assert [block["type"] for block in body["blocks"]] == ["header", "section", "section"]
    assert (
        body["blocks"][2]["text"]["type"] == "mrkdwn" and "<" in body["blocks"][2]["text"]["text"]
    )
    every_record = json.dumps([m.payload for m in OutboxMessage.objects.all()]) + json.dumps(
        list(AlertDelivery.objects.values("log", "dedupe_key"))
    )
    assert SLACK_SECRET not in caplog.text and SLACK_SECRET not in every_record


def test_a_refused_slack_url_is_retried_and_its_reason_names_no_address(
    series: Any, new_run: Any, settings: Any
) -> None:
    settings.GEO_OUTBOUND_ALLOW = []
    _fired(series, new_run, slack_webhook_url=f"http://127.0.0.1:9/services/{SLACK_SECRET}")
    (post,) = AlertDelivery.objects.filter(channel=Channel.SLACK, alert__condition_key=OPENAI)
    assert delivery.deliver(delivery_id=post.pk) is not None
    post.refresh_from_db()
    assert post.log[0]["status"] == "refused" and SLACK_SECRET not in json.dumps(post.log)


def test_a_lost_delivery_message_is_sent_again_by_the_sweep(
    series: Any, new_run: Any, settings: Any
) -> None:
    subscriber(new_run().tenant, "ana")
    _fired(series, new_run)
    (email,) = AlertDelivery.objects.filter(channel=Channel.EMAIL, alert__condition_key=OPENAI)
    settings.GEO_ALERT_SWEEP_SECONDS = 60  # the other alert's email is younger: left alone
    AlertDelivery.objects.filter(pk=email.pk).update(
        created_at=datetime.now(UTC) - timedelta(minutes=5)
    )
    assert delivery.sweep_stuck_deliveries() == 1
    assert delivery.sweep_stuck_deliveries() == 0  # claimed: its due time moved on
    assert (
        OutboxMessage.objects.filter(
            dedupe_key__startswith=f"alert-delivery:{email.pk}:sweep"
        ).count()
        == 1
    )


def _at(hour: int, tz: str = "Asia/Tokyo", day: int = 3) -> datetime:
    from zoneinfo import ZoneInfo

    return datetime(2026, 12, day, hour, 30, tzinfo=ZoneInfo(tz)).astimezone(UTC)


def test_the_digest_is_sent_once_a_local_day_outside_quiet_hours(series: Any, new_run: Any) -> None:
    tenant = new_run().tenant
    sub = subscriber(
        tenant, "ana", immediate=False, time_zone="Asia/Tokyo", digest_hour=8,
        quiet_start=22, quiet_end=9,
    )  # fmt: skip
    alert = _fired(series, new_run)
    assert not AlertDelivery.objects.filter(channel=Channel.EMAIL).exists()  # digest only
    Alert.objects.filter(pk=alert.pk).update(fired_at=_at(1) - timedelta(hours=2))
    assert digest.queue_due_digests(now=_at(7)) == 0  # before 08:00 in Tokyo
    assert digest.queue_due_digests(now=_at(8)) == 0  # 08:30 is still in quiet hours
    assert digest.queue_due_digests(now=_at(9)) == 1  # the first hour after them
    assert digest.queue_due_digests(now=_at(15)) == 0  # once a local day
    (sent,) = AlertDelivery.objects.filter(channel=Channel.DIGEST)
    assert sent.subscription_id == sub.pk and alert.pk in sent.alert_ids
    assert delivery.deliver(delivery_id=sent.pk) is None
    (message,) = mail.outbox
    assert message.subject.startswith("[GEO digest]") and alert.summary in message.body
    # The next local day: nothing new fired, no digest (the day is marked).
    assert digest.queue_due_digests(now=_at(10, day=4)) == 0
    assert AlertSubscription.objects.get(pk=sub.pk).last_digest_at == _at(10, day=4)


def test_quiet_hours_wrap_midnight_in_the_subscribers_zone(db: None) -> None:
    sub = AlertSubscription(time_zone="America/New_York", quiet_start=22, quiet_end=7)
    assert delivery.in_quiet_hours(sub, _at(23, "America/New_York"))
    assert delivery.in_quiet_hours(sub, _at(6, "America/New_York"))
    assert not delivery.in_quiet_hours(sub, _at(7, "America/New_York"))
    assert not delivery.in_quiet_hours(AlertSubscription(quiet_start=5, quiet_end=5), _at(5))
