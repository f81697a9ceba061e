"""Campaigns: list, create, read, patch, preview and launch (operators)."""

from __future__ import annotations

from typing import Any

import django_filters
from django.core.exceptions import PermissionDenied
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from billing.services import BillingError, InsufficientFunds, format_amount
from pipeline.preview import LaunchPreview, StalePreview, issue_launch_token, preview_campaign
from sampling.models import Campaign
from sampling.planning import PlanError
from sampling.snapshots import Quote
from tenancy.scope import allows, require_somewhere, tenants_where

from .. import schema_docs as docs
from ..base import ApiView, ScopedList, TenantIdFilter, list_schema
from ..errors import Conflict, DetailedError, invalid
from ..serializers import CampaignBodySerializer, CampaignSerializer
from ..services import KeyConflict, TokenUsed, create_campaign, launch_with_key, update_campaign

CHANGE = "sampling.change_campaign"
ADD_CAMPAIGN = "sampling.add_campaign"
LAUNCH = "sampling.add_run"


CAMPAIGNS = Campaign.objects.select_related("tenant", "brand")


class CampaignFilter(django_filters.FilterSet):
    tenant = TenantIdFilter()

    class Meta:
        model = Campaign
        fields = ["tenant"]


@list_schema(
    "List campaigns",
    "The campaigns of the caller's tenants (operators), newest first.",
    docs.CAMPAIGN_LIST,
)
class CampaignList(ScopedList):
    serializer_class = CampaignSerializer
    queryset = CAMPAIGNS
    filterset_class = CampaignFilter
    view_permission = "sampling.view_campaign"

    @extend_schema(
        summary="Create a campaign",
        description=(
            "The body is the campaign file's shape (tenant, name, brand, competitors, "
            "questions, targets, repeats, screenshot_policy). The tenant must be one of the "
            "caller's (operator). A 400 lists every problem with its field path."
        ),
        request=CampaignBodySerializer,
        responses={201: CampaignSerializer, 400: docs.ERROR},
        examples=[docs.CAMPAIGN_BODY, docs.CAMPAIGN, docs.VALIDATION_ERROR],
    )
    def post(self, request: Request) -> Response:
        require_somewhere(request.user, ADD_CAMPAIGN)
        slugs = None
        if not request.user.is_superuser:
            tenants = tenants_where(request.user, ADD_CAMPAIGN)
            slugs = set(tenants.values_list("slug", flat=True))
        try:
            campaign = create_campaign(data=request.data, tenant_slugs=slugs)
        except PlanError as error:
            return invalid(error.problems, "the campaign has problems; nothing was saved")
        return Response(CampaignSerializer(campaign).data, status=status.HTTP_201_CREATED)


class CampaignDetail(ApiView):
    serializer_class = CampaignSerializer
    queryset = CAMPAIGNS

    @extend_schema(
        summary="Read a campaign",
        description="One campaign in the campaign file's shape, with its id and timestamps.",
        examples=[docs.CAMPAIGN],
    )
    def get(self, request: Request, pk: int) -> Response:
        campaign = self.checked_object(pk, perm="sampling.view_campaign")
        return Response(CampaignSerializer(campaign).data)

    @extend_schema(
        summary="Change a campaign",
        description=(
            "Top-level fields given replace the campaign's (questions keep their revision "
            "history; runs already launched are unaffected). The tenant cannot change."
        ),
        request=CampaignBodySerializer(partial=True),
        responses={200: CampaignSerializer, 400: docs.ERROR},
        examples=[docs.CAMPAIGN_PATCH, docs.CAMPAIGN, docs.VALIDATION_ERROR],
    )
    def patch(self, request: Request, pk: int) -> Response:
        campaign = self.checked_object(pk, perm=CHANGE)
        try:
            campaign = update_campaign(campaign=campaign, changes=request.data)
        except PlanError as error:
            return invalid(error.problems, "the campaign has problems; nothing was saved")
        return Response(CampaignSerializer(campaign).data)


def preview_body(preview: LaunchPreview) -> dict[str, Any]:
    plan, quote = preview.plan, preview.quote
    per_platform: dict[str, list[int]] = {}
    for platform, size in zip(plan.batch_platforms, plan.batches, strict=True):
        per_platform.setdefault(platform, []).append(size)
    available = preview.available
    short = preview.short_by
    return {
        "samples": plan.samples,
        "batches": [
            {"platform": p, "batches": len(sizes), "sizes": sizes}
            for p, sizes in per_platform.items()
        ],
        "duplicates": plan.duplicates,
        "quote": None
        if quote is None
        else {
            "price_version": quote.price_version,
            "currency": quote.currency,
            "unit_prices": quote.to_json()["unit_prices"],
            "lines": [line.to_json() for line in quote.lines],
            "estimated_max": quote.estimated_max,
            "estimated_max_display": str(preview.estimated_max),
        },
        "quote_problem": preview.quote_problem,
        "available_balance": None if available is None else available.amount,
        "available_balance_display": None if available is None else str(available),
        "short_by": None if short is None else short.amount,
        "can_launch": preview.can_launch,
    }


class CampaignPreview(ApiView):
    queryset = CAMPAIGNS

    @extend_schema(
        summary="Preview a launch",
        description=(
            "The plan (samples, batches per platform, duplicate questions), the quote the "
            "launch will freeze (price version, unit prices, estimated maximum, currency) and "
            "the tenant's available balance, in minor units. When funds suffice, a one-time "
            "`preview_token` for `launch`; a changed campaign or price list makes it stale."
        ),
        request=None,
        responses={200: docs.PREVIEW, 400: docs.ERROR},
        examples=[docs.PREVIEW_EXAMPLE],
    )
    def post(self, request: Request, pk: int) -> Response:
        campaign = self.checked_object(pk, perm=LAUNCH)
        try:
            preview = preview_campaign(campaign=campaign)
        except PlanError as error:
            return invalid(error.problems, "the campaign cannot be planned")
        body = preview_body(preview)
        token = None
        if preview.can_launch and allows(request.user, CHANGE, campaign.tenant_id):
            assert preview.quote is not None
            token = issue_launch_token(
                self.launch_session(), campaign=campaign, quote=preview.quote
            )
        return Response({**body, "preview_token": token})


class CampaignLaunch(ApiView):
    queryset = CAMPAIGNS

    @extend_schema(
        summary="Launch a previewed plan",
        description=(
            "Launches the plan of a `preview` at its quote, holding the estimated maximum. "
            "`Idempotency-Key` is required: the same key and body again return the same run "
            "(200); another body under the same key is a 409 `idempotency_key_reused`. A "
            "stale preview token (the campaign or the price list changed) is a 409 "
            "`preview_stale`; a token already launched under another key a 409 "
            "`preview_used` with its `run_id`; funds short is a 402 naming the shortfall. "
            "The body is JSON (a form is a 415). Nothing is written on an error."
        ),
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                # Not blank, at most 200 characters (`_launch_problems`).
                {"type": "string", "minLength": 1, "maxLength": 200, "pattern": r"\S"},
                OpenApiParameter.HEADER,
                required=True,
                description="Any unique string per intended launch (e.g. a UUID).",
            )
        ],
        request=docs.LAUNCH_REQUEST,
        responses={
            201: docs.LAUNCH,
            200: docs.LAUNCH,
            400: docs.ERROR,
            402: docs.ERROR,
            409: docs.ERROR,
        },
        examples=[
            docs.LAUNCH_REQUEST_EXAMPLE,
            docs.LAUNCH_EXAMPLE,
            docs.FUNDS_SHORT_EXAMPLE,
            docs.STALE_PREVIEW_EXAMPLE,
            docs.USED_PREVIEW_EXAMPLE,
        ],
    )
    def post(self, request: Request, pk: int) -> Response:
        campaign = self.checked_object(pk, perm=LAUNCH)
        if not allows(request.user, CHANGE, campaign.tenant_id):
            raise PermissionDenied("your role may not launch this campaign")
        problems = _launch_problems(request)
        if problems:
            return invalid(problems)
        try:
            outcome = launch_with_key(
                session=self.launch_session(),
                user=request.user,
                campaign=campaign,
                key=request.headers["Idempotency-Key"],
                body=dict(request.data),
            )
        except KeyConflict as error:
            raise Conflict(str(error), code="idempotency_key_reused") from None
        except StalePreview as error:
            raise Conflict(str(error), code="preview_stale") from None
        except TokenUsed as error:
            raise DetailedError(
                409, str(error), code="preview_used", run_id=str(error.run.pk)
            ) from None
        except PlanError as error:
            return invalid(error.problems, "the campaign cannot be planned; nothing was launched")
        except InsufficientFunds as error:
            raise DetailedError(
                402,
                str(error),
                code="funds_short",
                shortfall=error.required - error.available,
                shortfall_display=format_amount(error.required - error.available, error.currency),
                available=error.available,
                required=error.required,
                currency=error.currency,
            ) from None
        except BillingError as error:
            raise Conflict(f"not launched: {error}", code="billing_refused") from None
        run = outcome.run
        quote = Quote.of(run)
        body = {
            "run_id": str(run.pk),
            "samples": run.planned_samples,
            "batches": run.batches.count(),
            "quote": None if quote is None else quote.to_json(),
        }
        return Response(
            body, status=status.HTTP_201_CREATED if outcome.created else status.HTTP_200_OK
        )


def _launch_problems(request: Request) -> list[str]:
    problems = []
    key = request.headers.get("Idempotency-Key", "")
    if not key.strip():
        problems.append("Idempotency-Key: the header is required")
    elif len(key) > 200:
        problems.append("Idempotency-Key: at most 200 characters")
    data = request.data
    token = data.get("preview_token") if isinstance(data, dict) else None
    if not isinstance(token, str) or not token:
        problems.append("preview_token: required (from POST /campaigns/{id}/preview)")
    return problems
