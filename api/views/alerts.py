"""Alerts of the caller's tenants (operators and analysts): list (newest first; filter by
campaign and state) and acknowledge. Every row is found through the caller's role in its own
tenant (tenancy/scope.py): another tenant's alert is a 404."""

from __future__ import annotations

from typing import Any

import django_filters
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from alerts.models import Alert, AlertState
from alerts.services import NotAcknowledgeable, acknowledge

from .. import schema_docs as docs
from ..base import ApiView, ScopedList, list_schema
from ..errors import Conflict
from ..pagination import IdCursor

VIEW = "alerts.view_alert"
CHANGE = "alerts.change_alert"
ALERTS = Alert.objects.select_related("rule", "acknowledged_by")


class AlertSerializer(serializers.ModelSerializer):
    kind = serializers.CharField(source="rule.kind", read_only=True)
    # null until someone acknowledges (an open alert, or one resolved unacknowledged)
    acknowledged_by: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )

    class Meta:
        model = Alert
        fields = [
            "id", "campaign", "rule", "kind", "condition_key", "state", "summary", "details",
            "run", "last_run", "fired_at", "acknowledged_at", "acknowledged_by", "resolved_at",
            "resolved_run", "resolution",
        ]  # fmt: skip


class AlertFilter(django_filters.FilterSet):
    campaign = django_filters.NumberFilter(field_name="campaign_id", help_text="campaign id")
    state = django_filters.ChoiceFilter(
        choices=AlertState.choices, help_text="open, acknowledged or resolved"
    )

    class Meta:
        model = Alert
        fields = ["campaign", "state"]


class NewestAlertFirst(IdCursor):
    ordering = "-id"  # ids grow with fired_at


EXAMPLE = {
    "id": 12,
    "campaign": 4,
    "rule": 2,
    "kind": "visibility_drop",
    "condition_key": "visibility_drop:openai",
    "state": "open",
    "summary": "visibility fell on openai: 80 % -> 20 % (n 40 -> 40, q=1.2e-07)",
    "details": {
        "metric": "visibility",
        "platform": "openai",
        "before": {"hits": 32, "n": 40, "rate": 0.8, "low": 0.652, "high": 0.895},
        "after": {"hits": 8, "n": 40, "rate": 0.2, "low": 0.105, "high": 0.348},
        "effect": -0.6,
        "direction": "down",
        "p_value": 1.1e-07,
        "q_value": 1.2e-07,
        "links": [{"label": "samples", "url": "/admin/sampling/sample/?run=…&platform=openai"}],
    },
    "run": docs.RUN_ID,
    "last_run": docs.RUN_ID,
    "fired_at": "2026-12-02T10:00:00Z",
    "acknowledged_at": None,
    "acknowledged_by": None,
    "resolved_at": None,
    "resolved_run": None,
    "resolution": "",
}


@list_schema(
    "List alerts",
    "Alerts of the caller's tenants (operators and analysts), newest first; filter by "
    "campaign and state. An alert is one condition of a rule: fired once, open (or "
    "acknowledged) while it holds, resolved when a later run no longer shows it. `details` "
    "holds the figures before and after (hits, n, rate and 95 % interval), the effect, p and "
    "q (Benjamini-Hochberg) values and links to the samples behind them.",
    OpenApiExample("A page", value={"next": None, "previous": None, "results": [EXAMPLE]}),
)
class AlertList(ScopedList):
    serializer_class = AlertSerializer
    pagination_class = NewestAlertFirst
    filterset_class = AlertFilter
    queryset = ALERTS
    view_permission = VIEW


class AlertAcknowledge(ApiView):
    serializer_class = AlertSerializer
    queryset = ALERTS

    @extend_schema(
        summary="Acknowledge an alert",
        description=(
            "open -> acknowledged, by the caller (operators and analysts). The condition is "
            "still watched and not notified again; a later run resolves it. An alert that is "
            "not open is a 409 (`not_open`)."
        ),
        request=None,
        responses={200: AlertSerializer, 409: docs.ERROR},
        examples=[
            OpenApiExample(
                "Acknowledged",
                value={**EXAMPLE, "state": "acknowledged", "acknowledged_by": "ana"},
                response_only=True,
            )
        ],
    )
    def post(self, request: Request, pk: int) -> Response:
        alert = self.checked_object(pk, perm=CHANGE)
        try:
            alert = acknowledge(alert=alert, user=request.user)
        except NotAcknowledgeable as error:
            raise Conflict(str(error), code="not_open") from None
        return Response(AlertSerializer(alert).data)
