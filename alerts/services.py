"""Write operations on alerts: fire (once per condition), resolve, acknowledge; rules and
subscriptions. Typed, keyword-only. Firing writes the alert's deliveries and their outbox
rows in the caller's transaction (alerts/delivery.py), and tells the followers of a fired
alert (the API's signed `alert.fired` webhook, registered by api/apps.py: alerts does not
import the API), which write their own outbox rows there too. Nothing here does network I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models.functions import Now

from sampling.models import Campaign, Run

from .models import UNRESOLVED, Alert, AlertRule, AlertState, AlertSubscription
from .rules import DEFAULTS

# A follower of a fired alert writes outbox rows in the caller's transaction and does nothing
# else (no network, no commit); it is called once per alert.
AlertFollower = Callable[[Alert], None]
_followers: dict[str, AlertFollower] = {}


def follow_alert_fired(*, name: str, follower: AlertFollower) -> None:
    """Register what an upper layer does when an alert fires, from its AppConfig.ready. By
    name: a second registration under the same name replaces the first."""
    _followers[name] = follower


def alert_followers() -> dict[str, AlertFollower]:
    return dict(_followers)


class NotAcknowledgeable(ValueError):
    pass


def create_rule(
    *, campaign: Campaign, kind: str, params: dict[str, Any] | None = None, **fields: Any
) -> AlertRule:
    if kind not in DEFAULTS:
        raise ValueError(f"unknown rule kind {kind!r}")
    return AlertRule.objects.create(
        tenant_id=campaign.tenant_id, campaign=campaign, kind=kind, params=params or {}, **fields
    )


def subscribe(*, user: Any, tenant: Any, **fields: Any) -> AlertSubscription:
    subscription, _ = AlertSubscription.objects.update_or_create(
        user=user, tenant=tenant, defaults=fields
    )
    return subscription


def fire(
    *, rule: AlertRule, run: Run, condition_key: str, summary: str, details: dict[str, Any]
) -> tuple[Alert, bool]:
    """The unresolved alert of (rule, condition): the existing one (its last run moved on,
    nothing sent again), or a new one with its deliveries. Inside the caller's transaction; a
    concurrent evaluation that fired the same condition first makes this one find it (the
    partial unique index, alert_one_unresolved_per_condition)."""
    from . import delivery  # the channels sit beside the state machine

    existing = Alert.objects.filter(rule=rule, condition_key=condition_key, state__in=UNRESOLVED)
    found = existing.first()
    if found is not None:
        existing.update(last_run=run)
        return found, False
    try:
        with transaction.atomic():
            alert = Alert.objects.create(
                tenant_id=rule.tenant_id,
                campaign_id=rule.campaign_id,
                rule=rule,
                condition_key=condition_key,
                run=run,
                last_run=run,
                summary=summary[:300],
                details=details,
            )
    except IntegrityError:  # fired by a concurrent evaluation between the read and the insert
        return existing.get(), False
    delivery.record_fired(alert=alert, rule=rule)
    for follower in _followers.values():
        follower(alert)
    return alert, True


def resolve(*, alert: Alert, run: Run | None, reason: str) -> bool:
    """open or acknowledged -> resolved, once (a conditional update)."""
    updated = Alert.objects.filter(pk=alert.pk, state__in=UNRESOLVED).update(
        state=AlertState.RESOLVED, resolved_at=Now(), resolved_run=run, resolution=reason[:200]
    )
    return updated == 1


def acknowledge(*, alert: Alert, user: Any) -> Alert:
    """open -> acknowledged, by a person. Acknowledged stays unresolved: the condition is
    still watched and not fired again; an evaluation resolves it."""
    updated = Alert.objects.filter(pk=alert.pk, state=AlertState.OPEN).update(
        state=AlertState.ACKNOWLEDGED, acknowledged_at=Now(), acknowledged_by=user
    )
    if updated != 1:
        alert.refresh_from_db()
        raise NotAcknowledgeable(f"the alert is {alert.state}, not open")
    alert.refresh_from_db()
    return alert
