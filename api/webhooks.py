"""Outgoing webhooks: `run.finished`, `run.needs_review` and `alert.fired` to a tenant's HTTPS
endpoints.

A run's end (pipeline/runs.py: after settlement, the run-end followers are told in one
transaction; `record_run_end` is ours, registered by api/apps.py) writes one `WebhookDelivery`
per endpoint and event, and an outbox message carrying only its id (sampling/services.py
`enqueue_outbox`; never the URL, the body or the secret). The dispatcher relays it after the
commit, and the Celery task `api.deliver_webhook` posts the JSON body with

    X-Geo-Event: run.finished
    X-Geo-Delivery: <delivery id>          (the same on every retry: receivers dedupe on it)
    X-Geo-Timestamp: <unix seconds>
    X-Geo-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>" with the secret>

A receiver recomputes the signature and refuses a timestamp further than a tolerance from its
clock (`verify`; README "Webhooks"), so a captured request cannot be replayed later.

Endpoint URLs go through connectors/outbound.py at registration and again at every attempt,
and the request is pinned to the address checked then (no DNS rebinding, no redirects); the
log records a status, "refused: ..." or "connection failed", never the network error's text.
A 2xx is delivered; anything else is retried with exponential backoff until
GEO_WEBHOOK_MAX_ATTEMPTS, then the delivery is failed. A delivery whose message was lost is
sent again by `sweep_stuck_deliveries` (the dispatcher's sweeps); a finished one can be sent
again on request (`redeliver`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import time
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F

from alerts.models import Alert
from connectors.outbound import OutboundRefused, post_pinned
from connectors.outbound import check_url as check_outbound_url
from pipeline.runs import RunEnded
from sampling import deliveries
from sampling.deliveries import LOG_KEPT
from sampling.models import Run
from sampling.selectors import Status
from sampling.services import complete_outbox, enqueue_outbox
from tenancy.models import Tenant

from .models import DeliveryState, WebhookDelivery, WebhookEndpoint, WebhookEvent

log = logging.getLogger(__name__)

TASK = "api.deliver_webhook"
ERROR_CHARS = 200
SWEEP_BATCH = 200


class WebhookUrlError(ValueError):
    pass


class NotRedeliverable(ValueError):
    pass


def new_secret() -> str:
    return secrets.token_hex(32)


def check_url(url: str) -> str:
    """`url` when it may receive webhooks (connectors/outbound.py: public addresses only,
    https:// except to GEO_OUTBOUND_ALLOW); WebhookUrlError naming the problem otherwise."""
    if len(url) > WebhookEndpoint._meta.get_field("url").max_length:  # type: ignore[operator]
        raise WebhookUrlError("url: longer than 500 characters")
    try:
        check_outbound_url(url)
    except OutboundRefused as error:
        raise WebhookUrlError(str(error)) from None
    return url.strip()


def sign(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify(
    secret: str,
    timestamp: str,
    body: bytes,
    signature: str,
    *,
    tolerance_seconds: int | None = None,
    now: float | None = None,
) -> bool:
    """What a receiver does (and the tests do): refuse a timestamp outside the tolerance
    (default GEO_WEBHOOK_TOLERANCE_SECONDS) of its clock, so a replay fails, then recompute
    the signature and compare in constant time."""
    tolerance = (
        settings.GEO_WEBHOOK_TOLERANCE_SECONDS if tolerance_seconds is None else tolerance_seconds
    )
    try:
        sent_at = int(timestamp)
    except ValueError:
        return False
    if abs((time.time() if now is None else now) - sent_at) > tolerance:
        return False
    return hmac.compare_digest(sign(secret, sent_at, body), signature)


# --- endpoints (API and console) --------------------------------------------------------------


def register_endpoint(*, tenant: Tenant, url: str, events: list[str]) -> WebhookEndpoint:
    return WebhookEndpoint.objects.create(
        tenant=tenant, url=check_url(url), events=events, secret=new_secret()
    )


def update_endpoint(
    *,
    endpoint: WebhookEndpoint,
    url: str | None = None,
    events: list[str] | None = None,
    active: bool | None = None,
) -> WebhookEndpoint:
    """The fields given, changed; a new URL is checked like a registration's."""
    changes: dict[str, Any] = {}
    if url is not None and url != endpoint.url:
        changes["url"] = check_url(url)
    if events is not None:
        changes["events"] = events
    if active is not None:
        changes["active"] = active
    for field, value in changes.items():
        setattr(endpoint, field, value)
    if changes:
        endpoint.save(update_fields=list(changes))
    return endpoint


def rotate_secret(*, endpoint: WebhookEndpoint) -> str:
    """A new signing secret, used from the next attempt on (the old one stops at once)."""
    endpoint.secret = new_secret()
    endpoint.save(update_fields=["secret"])
    return endpoint.secret


def redeliver(*, delivery: WebhookDelivery, by: str) -> WebhookDelivery:
    """A delivered or failed delivery, pending again with a fresh set of attempts and a new
    outbox message. Its id (X-Geo-Delivery) stays: it is the same event. Refused while it is
    still pending (its attempts are under way)."""
    with transaction.atomic():
        mark = {"redelivered_by": by[:80], "after_attempts": delivery.attempts}
        claimed = WebhookDelivery.objects.filter(
            pk=delivery.pk, state__in=[DeliveryState.DELIVERED, DeliveryState.FAILED]
        ).update(
            state=DeliveryState.PENDING,
            attempts=0,
            next_attempt_at=None,
            delivered_at=None,
            redeliveries=F("redeliveries") + 1,
            log=[*delivery.log, mark][-LOG_KEPT:],
        )
        if claimed != 1:
            raise NotRedeliverable("the delivery is still pending: its attempts are under way")
        delivery.refresh_from_db()
        _enqueue(delivery, reason=f"redeliver:{delivery.redeliveries}")
    return delivery


def _enqueue(delivery: WebhookDelivery, *, reason: str) -> None:
    enqueue_outbox(
        task=TASK,
        payload={"delivery_id": delivery.pk},
        dedupe_key=f"webhook:{delivery.pk}:{reason}",
    )


# --- events ---------------------------------------------------------------------------------


def events_for(status: Status) -> list[str]:
    events = [WebhookEvent.RUN_FINISHED.value]
    if status.review:
        events.append(WebhookEvent.RUN_NEEDS_REVIEW.value)
    return events


def record_run_end(ended: RunEnded) -> None:
    """A run-end follower (pipeline/runs.py): the deliveries of the run's events to the
    tenant's endpoints that want them, each with its outbox message, in the caller's
    transaction. Once per endpoint, event and round, however often the run's end is told."""
    run = Run.objects.select_related("tenant").get(pk=ended.run_id)
    endpoints = list(WebhookEndpoint.objects.filter(tenant_id=run.tenant_id, active=True))
    for event in events_for(ended.status):
        body = {
            "event": event,
            "run_id": str(run.pk),
            "tenant": run.tenant.slug,
            "campaign": run.campaign_id,
            **ended.status.as_dict(),
        }
        for endpoint in endpoints:
            if endpoint.wants(event):
                _record(endpoint, event, run, body, round_=ended.round)


def record_alert_fired(alert: Alert) -> None:
    """A follower of a fired alert (alerts/services.py `fire`, registered by api/apps.py): the
    `alert.fired` delivery to each of the tenant's endpoints that want it, in the firing
    transaction, once per endpoint and alert; only when the alert's rule asks for webhooks."""
    if not alert.rule.webhooks:
        return
    event = WebhookEvent.ALERT_FIRED.value
    run = Run.objects.select_related("tenant").get(pk=alert.run_id)
    body = {
        "event": event,
        "alert_id": alert.pk,
        "tenant": run.tenant.slug,
        "campaign": alert.campaign_id,
        "run_id": str(run.pk),
        "kind": alert.rule.kind,
        "condition": alert.condition_key,
        "summary": alert.summary,
        "details": alert.details,
    }
    for endpoint in WebhookEndpoint.objects.filter(tenant_id=alert.tenant_id, active=True):
        if endpoint.wants(event):
            key = f"{endpoint.pk}:{event}:{alert.pk}"
            delivery, created = WebhookDelivery.objects.get_or_create(
                dedupe_key=key,
                defaults={"endpoint": endpoint, "event": event, "run": run, "payload": body},
            )
            if created:
                enqueue_outbox(
                    task=TASK,
                    payload={"delivery_id": delivery.pk},
                    dedupe_key=f"webhook:{delivery.pk}",
                )


def _record(
    endpoint: WebhookEndpoint, event: str, run: Run, body: dict[str, Any], *, round_: int
) -> None:
    key = f"{endpoint.pk}:{event}:{run.pk}:{round_}"
    with transaction.atomic():  # the delivery and its message, also when called on its own
        delivery, created = WebhookDelivery.objects.get_or_create(
            dedupe_key=key,
            defaults={"endpoint": endpoint, "event": event, "run": run, "payload": body},
        )
        if created:  # the first message keeps its old dedupe key, "webhook:<id>"
            enqueue_outbox(
                task=TASK, payload={"delivery_id": delivery.pk}, dedupe_key=f"webhook:{delivery.pk}"
            )


# --- delivery -------------------------------------------------------------------------------


def deliver(*, delivery_id: int, outbox_id: int | None = None) -> float | None:
    """One attempt. Returns the delay before the next one, or None when done (delivered,
    failed for good, or not pending). No transaction is held during the request. The message
    (`outbox_id`) is completed with the attempt's record (sampling/deliveries.py): its effect
    is an attempt made (a retry's own message is the sweep's to repair), or nothing left to
    attempt."""
    delivery = WebhookDelivery.objects.select_related("endpoint").filter(pk=delivery_id).first()
    if delivery is None or delivery.state != DeliveryState.PENDING:
        complete_outbox(outbox_id=outbox_id)
        return None
    endpoint = delivery.endpoint
    body = json.dumps({**delivery.payload, "delivery_id": delivery.pk}, sort_keys=True).encode()
    timestamp = int(time.time())
    code, error = _post(endpoint, delivery, body, timestamp)
    entry = {
        "attempt": delivery.attempts + 1,
        "at": timestamp,
        "status": code,
        "error": error[:ERROR_CHARS],
    }
    recorded, state, delay = deliveries.record_attempt(
        delivery,
        ok=code is not None and 200 <= code < 300,
        entry=entry,
        max_attempts=int(settings.GEO_WEBHOOK_MAX_ATTEMPTS),
        backoff_base=float(settings.GEO_WEBHOOK_BACKOFF_SECONDS),
        outbox_id=outbox_id,
    )
    if not recorded:
        return None  # another worker recorded this attempt
    log.info(
        "webhook delivery=%s event=%s attempt=%s status=%s state=%s",
        delivery.pk,
        delivery.event,
        entry["attempt"],
        code,
        state,
    )
    return delay


def _post(
    endpoint: WebhookEndpoint, delivery: WebhookDelivery, body: bytes, timestamp: int
) -> tuple[int | None, str]:
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "geo-collect-webhooks/1",
        "X-Geo-Event": delivery.event,
        "X-Geo-Delivery": str(delivery.pk),
        "X-Geo-Timestamp": str(timestamp),
        "X-Geo-Signature": sign(endpoint.secret, timestamp, body),
    }
    # Checked again now and pinned to the address checked (connectors/outbound.py).
    status, error = post_pinned(
        endpoint.url,
        body=body,
        headers=headers,
        timeout=float(settings.GEO_WEBHOOK_TIMEOUT_SECONDS),
    )
    if status is None:
        return None, error
    return status, "" if 200 <= status < 300 else f"HTTP {status}"


# --- the sweep (pipeline/sweeps.py, every dispatcher bookkeeping tick) -------------------------


def sweep_stuck_deliveries(*, limit: int = SWEEP_BATCH) -> int:
    """Send again the pending deliveries whose message was lost, for longer than
    GEO_WEBHOOK_SWEEP_SECONDS (sampling/deliveries.py `sweep_stuck`)."""
    resent = deliveries.sweep_stuck(
        WebhookDelivery,
        grace_seconds=float(settings.GEO_WEBHOOK_SWEEP_SECONDS),
        limit=limit,
        send_again=_enqueue_sweep,
    )
    if resent:
        log.warning("webhook sweep: %s stuck deliveries sent again", resent)
    return resent


def _enqueue_sweep(pk: int, attempts: int) -> None:
    stamp = int(time.time())
    enqueue_outbox(
        task=TASK,
        payload={"delivery_id": pk},
        dedupe_key=f"webhook:{pk}:sweep:{attempts}:{stamp}",
    )
