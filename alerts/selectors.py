"""Reads of alerts for people: always through the one scope (tenancy/scope.py)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from tenancy.scope import scoped

from .models import Alert

VIEW = "alerts.view_alert"


def alerts_for(
    user: Any, *, campaign_id: int | None = None, state: str | None = None
) -> QuerySet[Alert]:
    found = scoped(Alert.objects.select_related("rule", "campaign"), user).order_by(
        "-fired_at", "-id"
    )
    if campaign_id is not None:
        found = found.filter(campaign_id=campaign_id)
    if state:
        found = found.filter(state=state)
    return found
