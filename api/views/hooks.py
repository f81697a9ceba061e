"""Webhook endpoints of the caller's tenants (operators): list and register."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from tenancy.models import Tenant
from tenancy.scope import require_somewhere, tenants_where

from .. import schema_docs as docs
from ..base import ScopedList, list_schema
from ..errors import invalid
from ..models import WebhookEndpoint, WebhookEvent
from ..webhooks import WebhookUrlError, check_url, new_secret

ADD = "api.add_webhookendpoint"


class WebhookEndpointSerializer(serializers.ModelSerializer):
    tenant: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )

    class Meta:
        model = WebhookEndpoint
        fields = ["id", "tenant", "url", "events", "active", "created_at"]


class WebhookBodySerializer(serializers.Serializer):
    tenant = serializers.CharField()
    url = serializers.CharField()
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=WebhookEvent.values), required=False
    )


EXAMPLE = {
    "id": 3,
    "tenant": "acme",
    "url": "https://hooks.example.com/geo",
    "events": ["run.finished"],
    "active": True,
    "created_at": "2026-11-30T10:00:00Z",
}


@list_schema(
    "Webhook endpoints",
    "The caller's tenants' endpoints (operators). Secrets are not listed.",
    OpenApiExample("A page", value={"next": None, "previous": None, "results": [EXAMPLE]}),
)
class Webhooks(ScopedList):
    serializer_class = WebhookEndpointSerializer
    queryset = WebhookEndpoint.objects.select_related("tenant")
    view_permission = "api.view_webhookendpoint"

    @extend_schema(
        summary="Register a webhook endpoint",
        description=(
            "An https:// URL for `run.finished` and/or `run.needs_review` (empty: both). The "
            "response carries the signing `secret`, shown here once (and on the console page)."
        ),
        request=WebhookBodySerializer,
        responses={201: WebhookEndpointSerializer, 400: docs.ERROR},
        examples=[
            OpenApiExample(
                "Register",
                value={"tenant": "acme", "url": "https://hooks.example.com/geo", "events": []},
                request_only=True,
            ),
            OpenApiExample("Registered", value={**EXAMPLE, "secret": "9b1…"}, response_only=True),
        ],
    )
    def post(self, request: Request) -> Response:
        require_somewhere(request.user, ADD)
        tenant, data, problems = _registration(request)
        if tenant is None or problems:
            return invalid(problems, "the endpoint was not registered")
        endpoint = WebhookEndpoint.objects.create(
            tenant=tenant, url=data["url"], events=data.get("events", []), secret=new_secret()
        )
        out = {**WebhookEndpointSerializer(endpoint).data, "secret": endpoint.secret}
        return Response(out, status=status.HTTP_201_CREATED)


def _registration(request: Request) -> tuple[Tenant | None, dict[str, Any], list[str]]:
    body = WebhookBodySerializer(data=request.data)
    if not body.is_valid():
        return None, {}, [f"{k}: {' '.join(map(str, v))}" for k, v in body.errors.items()]
    data: dict[str, Any] = dict(body.validated_data)
    tenant = tenants_where(request.user, ADD).filter(slug=data["tenant"]).first()
    if tenant is None:
        return None, data, [f"tenant: {data['tenant']!r} is not one of your tenants"]
    try:
        check_url(data["url"])
    except WebhookUrlError as error:
        return tenant, data, [str(error)]
    return tenant, data, []
