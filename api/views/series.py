"""A campaign's metrics series over time (monitoring.selectors.series), in segments."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from typing import Any

from django.utils.dateparse import parse_date, parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from monitoring.selectors import METRICS, series
from sampling.models import Campaign

from .. import schema_docs as docs
from ..base import ApiView
from ..errors import invalid

VIEW_SERIES = "monitoring.view_seriesrow"
TEXT_FILTERS = ("entity", "platform", "region", "device", "mode", "topic")


def _moment(value: str, *, end: bool) -> datetime | None:
    """An ISO datetime (naive: UTC), or a date: its start (`from`) or its end (`to`)."""
    moment = parse_datetime(value)
    if moment is not None:
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    day = parse_date(value)
    if day is None:
        return None
    start = datetime.combine(day, time.min, tzinfo=UTC)
    return start + timedelta(days=1) - timedelta(microseconds=1) if end else start


def _parameters() -> list[OpenApiParameter]:
    text = {
        "entity": "the brand (default) or a competitor, by name",
        "platform": "only this platform's targets (default: every target, pooled per run)",
        "region": "only targets in this region",
        "device": "only targets on this device",
        "mode": "only targets in this mode",
        "topic": "only the questions of this topic (default: all of the run's questions)",
    }
    return [
        OpenApiParameter(
            "metric",
            str,
            description="what to compute per run (default visibility)",
            enum=list(METRICS),
        ),
        *(OpenApiParameter(name, str, description=help_) for name, help_ in text.items()),
        OpenApiParameter("question", int, description="only this question (its id)"),
        OpenApiParameter(
            "from",
            OpenApiTypes.DATETIME,
            description="runs finished at or after (a date: 00:00 UTC)",
        ),
        OpenApiParameter(
            "to", OpenApiTypes.DATETIME, description="runs finished at or before (a date: its end)"
        ),
    ]


class CampaignSeries(ApiView):
    queryset = Campaign.objects.select_related("tenant", "brand")

    @extend_schema(
        summary="A campaign's metric over time",
        description=(
            "One point per finished run (oldest first): hits, n, the rate and its Wilson 95 % "
            "interval (none for average_position, a mean), and the index of its segment. A "
            "segment is a stretch of consecutive runs that measured the same thing (the same "
            "targets, questions, model and analyser: the comparability key); `segments` says "
            "where each starts and ends and what changed at its start. Never compare points "
            "of different segments. Target filters left out pool every target of a run. "
            "Operators and analysts of the campaign's tenant; another tenant's campaign is a "
            "404."
        ),
        parameters=_parameters(),
        responses={200: docs.SERIES, 400: docs.ERROR},
        examples=[docs.SERIES_EXAMPLE],
    )
    def get(self, request: Request, pk: int) -> Response:
        campaign: Campaign = self.checked_object(pk, perm=VIEW_SERIES)
        query = request.query_params
        problems: list[str] = []
        metric = query.get("metric") or "visibility"
        if metric not in METRICS:
            problems.append(f"metric: {metric!r} is not one of {', '.join(METRICS)}")
        filters: dict[str, Any] = {name: query.get(name) or None for name in TEXT_FILTERS}
        question: int | None = None
        if query.get("question"):
            try:
                question = int(query["question"])
            except ValueError:
                problems.append("question: expected a question id")
        bounds: dict[str, datetime | None] = {}
        for name, end in (("from", False), ("to", True)):
            raw = query.get(name)
            bounds[name] = _moment(raw, end=end) if raw else None
            if raw and bounds[name] is None:
                problems.append(f"{name}: expected an ISO 8601 date or datetime")
        if problems:
            return invalid(problems)
        found = series(
            campaign=campaign,
            metric=metric,
            question=question,
            since=bounds["from"],
            until=bounds["to"],
            **filters,
        )
        return Response({"campaign": campaign.pk, **found.as_dict()})
