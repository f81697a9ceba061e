"""The daily digest: per subscriber and tenant, one email a local day listing the alerts
fired since the last one, at `digest_hour` in the subscriber's time zone, never in their
quiet hours (then at the first hour after them). Queued by a sweep of the dispatcher
(`queue_due_digests`, every GEO_ALERT_DIGEST_EVERY_SECONDS): each subscription is claimed
by a conditional update of its `last_digest_at`, its delivery (dedupe key: subscription and
local date) and outbox row written in that transaction, sent by `alerts.deliver`.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import EmailMessage
from django.db import transaction

from sampling.dbtime import db_now

from .delivery import _record, alert_lines, in_quiet_hours, subscribers, zone
from .models import Alert, AlertSubscription, Channel

FIRST_LOOKBACK = timedelta(days=1)  # a first digest lists the last day's alerts


def every() -> float:
    return float(settings.GEO_ALERT_DIGEST_EVERY_SECONDS)


def due(subscription: AlertSubscription, now: datetime) -> bool:
    local = now.astimezone(zone(subscription))
    if local.hour < subscription.digest_hour or in_quiet_hours(subscription, now):
        return False
    last = subscription.last_digest_at
    return last is None or last.astimezone(zone(subscription)).date() < local.date()


def queue_due_digests(*, now: datetime | None = None) -> int:
    """Queue every due digest; a subscriber with nothing new gets none (the day is marked)."""
    now = now or db_now()
    queued = 0
    tenants = (
        AlertSubscription.objects.filter(daily_digest=True)
        .values_list("tenant_id", flat=True)
        .distinct()
    )
    for tenant_id in list(tenants):
        for subscription in subscribers(tenant_id=tenant_id, digest=True):
            if due(subscription, now):
                queued += _queue(subscription, now)
    return queued


def _queue(subscription: AlertSubscription, now: datetime) -> int:
    since = subscription.last_digest_at or now - FIRST_LOOKBACK
    with transaction.atomic():
        claimed = AlertSubscription.objects.filter(
            pk=subscription.pk, last_digest_at=subscription.last_digest_at
        ).update(last_digest_at=now)
        if claimed != 1:
            return 0
        ids = list(
            Alert.objects.filter(
                tenant_id=subscription.tenant_id, fired_at__gt=since, fired_at__lte=now
            )
            .order_by("fired_at")
            .values_list("pk", flat=True)
        )
        if not ids:
            return 0
        local_day = now.astimezone(zone(subscription)).date().isoformat()
        _record(
            subscription.tenant_id,
            Channel.DIGEST,
            f"digest:{subscription.pk}:{local_day}",
            subscription=subscription,
            alert_ids=ids,
        )
    return 1


def digest_message(subscription: AlertSubscription, alert_ids: list[int]) -> EmailMessage:
    alerts = list(
        Alert.objects.filter(pk__in=alert_ids, tenant_id=subscription.tenant_id).order_by(
            "fired_at"
        )
    )
    parts = [f"{len(alerts)} alert(s) for {subscription.tenant.name}", ""]
    for alert in alerts:
        parts.extend([f"[{alert.state}] " + alert_lines(alert)[0], *alert_lines(alert)[1:], ""])
    return EmailMessage(
        subject=f"[GEO digest] {len(alerts)} alert(s) for {subscription.tenant.name}",
        body="\n".join(parts),
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[subscription.user.email],
    )
