"""Delivering alerts: email (Django's email framework), Slack incoming webhooks, digests.

A fired alert writes, in the firing transaction (alerts/services.py `fire`), one
`AlertDelivery` per channel and recipient and an outbox row carrying only its id; the
dispatcher relays it after the commit and the task `alerts.deliver` makes one attempt with
no transaction open. A failure is retried with exponential backoff (GEO_ALERT_BACKOFF_SECONDS,
doubling, at most an hour) until GEO_ALERT_MAX_ATTEMPTS, then the delivery is failed; one
whose message was lost is sent again by `sweep_stuck_deliveries` (the dispatcher's sweeps).

Email goes to the tenant's subscribers (alerts.AlertSubscription with `immediate`) who are
outside their quiet hours when the alert fires; the others read it in their daily digest
(alerts/digest.py). Slack: the rule's incoming-webhook URL, posted through
connectors/outbound.py (public addresses only, pinned to the checked address) with Slack's
message shape, `{"text": ..., "blocks": [...]}`: `text` is the notification's fallback, the
blocks the formatted message. The URL is a secret (it is the credential): the log and the
delivery's record keep a status or "connection failed", never the URL or a network error's
text. The signed `alert.fired` webhook is the API's (api/webhooks.py), a follower of `fire`.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings
from django.core.mail import EmailMessage

from connectors.outbound import post_pinned
from sampling import deliveries
from sampling.dbtime import db_now
from sampling.services import complete_outbox, enqueue_outbox
from tenancy.models import TenantMembership

from .models import Alert, AlertDelivery, AlertRule, AlertSubscription, Channel, DeliveryState

log = logging.getLogger(__name__)

TASK = "alerts.deliver"
SWEEP_BATCH = 200


# --- recording (inside the firing transaction) ------------------------------------------------


def record_fired(*, alert: Alert, rule: AlertRule) -> list[AlertDelivery]:
    """The alert's deliveries and their outbox rows, in the caller's transaction."""
    made = []
    if rule.email:
        now = db_now()
        for subscription in subscribers(tenant_id=alert.tenant_id, immediate=True):
            if in_quiet_hours(subscription, now):
                continue  # the digest carries it
            made.append(
                _record(
                    alert.tenant_id,
                    Channel.EMAIL,
                    f"alert:{alert.pk}:email:{subscription.pk}",
                    alert=alert,
                    subscription=subscription,
                )
            )
    if rule.slack_webhook_url:
        made.append(_record(alert.tenant_id, Channel.SLACK, f"alert:{alert.pk}:slack", alert=alert))
    return made


def _record(
    tenant_id: int,
    channel: str,
    key: str,
    *,
    alert: Alert | None = None,
    subscription: AlertSubscription | None = None,
    alert_ids: list[int] | None = None,
) -> AlertDelivery:
    delivery, created = AlertDelivery.objects.get_or_create(
        dedupe_key=key,
        defaults={
            "tenant_id": tenant_id,
            "channel": channel,
            "alert": alert,
            "subscription": subscription,
            "alert_ids": alert_ids or [],
        },
    )
    if created:
        enqueue_outbox(
            task=TASK,
            payload={"delivery_id": delivery.pk},
            dedupe_key=f"alert-delivery:{delivery.pk}",
        )
    return delivery


def subscribers(
    *, tenant_id: int, immediate: bool | None = None, digest: bool | None = None
) -> Any:
    """The tenant's subscriptions whose person still belongs to the tenant (a membership: any
    role that reads alerts) and has an email address."""
    members = TenantMembership.objects.filter(tenant_id=tenant_id, role__in=ALERT_ROLES).values(
        "user_id"
    )
    found = (
        AlertSubscription.objects.filter(
            tenant_id=tenant_id, user__in=members, user__is_active=True
        )
        .exclude(user__email="")
        .select_related("user", "tenant")
    )
    if immediate is not None:
        found = found.filter(immediate=immediate)
    if digest is not None:
        found = found.filter(daily_digest=digest)
    return found


ALERT_ROLES = ("operator", "analyst")  # finance reads no answers, so no alerts


def zone(subscription: AlertSubscription) -> ZoneInfo:
    try:
        return ZoneInfo(subscription.time_zone)
    except (ZoneInfoNotFoundError, ValueError):
        return ZoneInfo("UTC")


def in_quiet_hours(subscription: AlertSubscription, now: datetime) -> bool:
    """Quiet from `quiet_start` to `quiet_end` (local hours, wrapping midnight when start >
    end; equal: never quiet)."""
    start, end = subscription.quiet_start, subscription.quiet_end
    if start == end:
        return False
    hour = now.astimezone(zone(subscription)).hour
    return start <= hour < end if start < end else hour >= start or hour < end


# --- the messages ---------------------------------------------------------------------------


def absolute(url: str) -> str:
    base = str(settings.GEO_CONSOLE_BASE_URL).rstrip("/")
    return f"{base}{url}" if base and url.startswith("/") else url


def _figure(figure: dict[str, Any] | None) -> str:
    if not figure:
        return "n/a"
    value = figure.get("rate")
    if value is None:
        return f"n/a (n={figure.get('n', 0)})"
    return (
        f"{100 * value:.1f} % ({figure['hits']}/{figure['n']}, "
        f"95 % CI {100 * figure['low']:.1f}-{100 * figure['high']:.1f} %)"
    )


def figure_lines(alert: Alert) -> list[str]:
    """What changed, in figures: before (when compared), after, and the p and q values."""
    d = alert.details
    lines = [f"before: {_figure(d.get('before'))}"] if "before" in d else []
    lines.append(f"after: {_figure(d.get('after'))}")
    if "p_value" in d:
        lines.append(f"p = {d['p_value']:.3g}, q = {d['q_value']:.3g}")
    return lines


def alert_lines(alert: Alert) -> list[str]:
    d = alert.details
    lines = [alert.summary, *figure_lines(alert)]
    for link in d.get("links", []):
        lines.append(f"{link['label']}: {absolute(link['url'])}")
    return lines


def email_message(alert: Alert, to: str) -> EmailMessage:
    subject = f"[GEO alert] {alert.summary}"[:200]
    body = "\n".join(
        [*alert_lines(alert), "", f"campaign {alert.campaign_id}, run {alert.run_id}", ""]
    )
    return EmailMessage(subject=subject, body=body, from_email=settings.DEFAULT_FROM_EMAIL, to=[to])


def slack_body(alert: Alert) -> dict[str, Any]:
    """Slack's incoming-webhook message: `text` (the notification, and the fallback) and
    `blocks` (a header and a mrkdwn section)."""
    lines = alert_lines(alert)
    links = " | ".join(
        f"<{absolute(link['url'])}|{link['label']}>" for link in alert.details.get("links", [])
    )
    section = "\n".join([*lines[1 : len(lines) - len(alert.details.get("links", []))], links])
    return {
        "text": f"GEO alert: {alert.summary}",
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": "GEO alert"[:150]}},
            {"type": "section", "text": {"type": "mrkdwn", "text": f"*{alert.summary}*"}},
            {"type": "section", "text": {"type": "mrkdwn", "text": section.strip() or "-"}},
        ],
    }


# --- one attempt (the task, no transaction open during the I/O) -----------------------------


def deliver(*, delivery_id: int, outbox_id: int | None = None) -> float | None:
    """One attempt; the delay before the next, or None when done. Recorded by
    sampling/deliveries.py `record_attempt`, which completes the message with it."""
    delivery = (
        AlertDelivery.objects.select_related(
            "alert__rule", "subscription__user", "subscription__tenant"
        )
        .filter(pk=delivery_id)
        .first()
    )
    if delivery is None or delivery.state != DeliveryState.PENDING:
        complete_outbox(outbox_id=outbox_id)
        return None
    ok, status = _send(delivery)
    entry = {"attempt": delivery.attempts + 1, "at": int(time.time()), "status": status}
    recorded, state, delay = deliveries.record_attempt(
        delivery,
        ok=ok,
        entry=entry,
        max_attempts=int(settings.GEO_ALERT_MAX_ATTEMPTS),
        backoff_base=float(settings.GEO_ALERT_BACKOFF_SECONDS),
        outbox_id=outbox_id,
    )
    if not recorded:
        return None
    log.info(
        "alert delivery=%s channel=%s attempt=%s status=%s state=%s",
        delivery.pk,
        delivery.channel,
        entry["attempt"],
        status,
        state,
    )
    return delay


def _send(delivery: AlertDelivery) -> tuple[bool, str]:
    """(delivered, a status safe to log): never an address, URL or exception text."""
    if delivery.channel == Channel.SLACK:
        assert delivery.alert is not None
        url = delivery.alert.rule.slack_webhook_url
        if not url:
            return False, "no slack url"
        body = json.dumps(slack_body(delivery.alert)).encode()
        code, error = post_pinned(
            url,
            body=body,
            headers={"Content-Type": "application/json", "User-Agent": "geo-collect-alerts/1"},
            timeout=float(settings.GEO_ALERT_TIMEOUT_SECONDS),
        )
        if code is None:
            return False, error.split(":", 1)[0] if error.startswith("refused") else error
        return 200 <= code < 300, f"HTTP {code}"
    subscription = delivery.subscription
    if subscription is None:
        return False, "no recipient"
    if delivery.channel == Channel.DIGEST:
        from .digest import digest_message

        message = digest_message(subscription, delivery.alert_ids)
    else:
        assert delivery.alert is not None
        message = email_message(delivery.alert, subscription.user.email)
    try:
        message.send(fail_silently=False)
    except Exception as error:
        return False, f"email failed: {type(error).__name__}"
    return True, "sent"


# --- the sweep ------------------------------------------------------------------------------


def sweep_stuck_deliveries(*, limit: int = SWEEP_BATCH) -> int:
    """Send again pending deliveries whose message was lost, for longer than
    GEO_ALERT_SWEEP_SECONDS (sampling/deliveries.py `sweep_stuck`)."""
    resent = deliveries.sweep_stuck(
        AlertDelivery,
        grace_seconds=float(settings.GEO_ALERT_SWEEP_SECONDS),
        limit=limit,
        send_again=_send_again,
    )
    if resent:
        log.warning("alert delivery sweep: %s stuck deliveries sent again", resent)
    return resent


def _send_again(pk: int, attempts: int) -> None:
    enqueue_outbox(
        task=TASK,
        payload={"delivery_id": pk},
        dedupe_key=f"alert-delivery:{pk}:sweep:{attempts}:{int(time.time())}",
    )
