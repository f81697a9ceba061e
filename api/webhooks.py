"""Outgoing webhooks: `run.finished` and `run.needs_review` to a tenant's HTTPS endpoints.

A run's end (pipeline/runs.py: after settlement, the run-end followers are told in one
transaction; `record_run_end` is ours, registered by api/apps.py) writes one `WebhookDelivery`
per endpoint and event, and an outbox message carrying only its id (sampling/services.py
`enqueue_outbox`; never the URL, the body or the secret). The dispatcher relays it after the
commit, and the Celery task `api.deliver_webhook` posts the JSON body with

    X-Geo-Event: run.finished
    X-Geo-Delivery: <delivery id>          (the same on every retry: receivers dedupe on it)
    X-Geo-Timestamp: <unix seconds>
    X-Geo-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>" with the secret>

and records every attempt in the delivery's log. A 2xx is delivered; anything else is retried
with exponential backoff until GEO_WEBHOOK_MAX_ATTEMPTS, then the delivery is failed.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import secrets
import time
from typing import Any
from urllib.parse import urlsplit

import requests
from django.conf import settings
from django.db import transaction
from django.db.models.functions import Now

from pipeline.runs import RunEnded
from sampling.models import Run
from sampling.selectors import Status
from sampling.services import enqueue_outbox

from .models import DeliveryState, WebhookDelivery, WebhookEndpoint, WebhookEvent

log = logging.getLogger(__name__)

TASK = "api.deliver_webhook"
LOG_KEPT = 20
ERROR_CHARS = 200


class WebhookUrlError(ValueError):
    pass


def new_secret() -> str:
    return secrets.token_hex(32)


def check_url(url: str) -> str:
    """HTTPS only; plain HTTP only to a loopback address when GEO_ALLOW_HTTP=1 (tests)."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return url
    if parts.scheme == "http" and _loopback(parts.hostname or "") and _http_allowed():
        return url
    raise WebhookUrlError(f"url: {url[:80]!r} is not an https:// URL")


def _http_allowed() -> bool:
    import os

    return os.environ.get("GEO_ALLOW_HTTP", "0") == "1"


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def sign(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify(secret: str, timestamp: str, body: bytes, signature: str) -> bool:
    """What a receiver does (and the tests do): recompute and compare in constant time."""
    return hmac.compare_digest(sign(secret, int(timestamp), body), signature)


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


def _record(
    endpoint: WebhookEndpoint, event: str, run: Run, body: dict[str, Any], *, round_: int
) -> None:
    key = f"{endpoint.pk}:{event}:{run.pk}:{round_}"
    with transaction.atomic():  # the delivery and its message, also when called on its own
        delivery, created = WebhookDelivery.objects.get_or_create(
            dedupe_key=key,
            defaults={"endpoint": endpoint, "event": event, "run": run, "payload": body},
        )
        if created:
            enqueue_outbox(
                task=TASK, payload={"delivery_id": delivery.pk}, dedupe_key=f"webhook:{delivery.pk}"
            )


# --- delivery -------------------------------------------------------------------------------


def backoff_seconds(attempts: int) -> float:
    base = float(settings.GEO_WEBHOOK_BACKOFF_SECONDS)
    return float(min(base * 2 ** max(attempts - 1, 0), 3600))


def deliver(*, delivery_id: int) -> float | None:
    """One attempt. Returns the delay before the next one, or None when done (delivered,
    failed for good, or not pending). No transaction is held during the request."""
    delivery = WebhookDelivery.objects.select_related("endpoint").filter(pk=delivery_id).first()
    if delivery is None or delivery.state != DeliveryState.PENDING:
        return None
    endpoint = delivery.endpoint
    body = json.dumps({**delivery.payload, "delivery_id": delivery.pk}, sort_keys=True).encode()
    timestamp = int(time.time())
    code, error = _post(endpoint, delivery, body, timestamp)
    attempts = delivery.attempts + 1
    entry = {"attempt": attempts, "at": timestamp, "status": code, "error": error[:ERROR_CHARS]}
    ok = code is not None and 200 <= code < 300
    exhausted = attempts >= int(settings.GEO_WEBHOOK_MAX_ATTEMPTS)
    state = (
        DeliveryState.DELIVERED
        if ok
        else DeliveryState.FAILED
        if exhausted
        else DeliveryState.PENDING
    )
    delay = None if ok or exhausted else backoff_seconds(attempts)
    updated = WebhookDelivery.objects.filter(
        pk=delivery.pk, attempts=delivery.attempts, state=DeliveryState.PENDING
    ).update(
        attempts=attempts,
        state=state,
        log=[*delivery.log, entry][-LOG_KEPT:],
        delivered_at=Now() if ok else None,
    )
    if updated != 1:
        return None  # another worker recorded this attempt
    log.info(
        "webhook delivery=%s event=%s attempt=%s status=%s state=%s",
        delivery.pk,
        delivery.event,
        attempts,
        code,
        state,
    )
    return delay


def _post(
    endpoint: WebhookEndpoint, delivery: WebhookDelivery, body: bytes, timestamp: int
) -> tuple[int | None, str]:
    try:
        url = check_url(endpoint.url)
    except WebhookUrlError as error:
        return None, str(error)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "geo-collect-webhooks/1",
        "X-Geo-Event": delivery.event,
        "X-Geo-Delivery": str(delivery.pk),
        "X-Geo-Timestamp": str(timestamp),
        "X-Geo-Signature": sign(endpoint.secret, timestamp, body),
    }
    try:
        response = requests.post(
            url,
            data=body,
            headers=headers,
            timeout=float(settings.GEO_WEBHOOK_TIMEOUT_SECONDS),
            allow_redirects=False,
        )
    except requests.RequestException as error:
        return None, type(error).__name__
    return response.status_code, "" if response.ok else f"HTTP {response.status_code}"
