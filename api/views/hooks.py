"""Webhook endpoints of the caller's tenants (operators): list, register, read, update or
deactivate, delete, rotate the secret; an endpoint's deliveries, and a redelivery. Every row
is found through the caller's role in its own tenant (tenancy/scope.py)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiExample, extend_schema, inline_serializer
from rest_framework import mixins, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from tenancy.models import Tenant
from tenancy.scope import require_somewhere, role_checked_get, tenants_where

from .. import schema_docs as docs
from ..base import ApiView, ScopedList, list_schema
from ..errors import Conflict, invalid
from ..models import WebhookDelivery, WebhookEndpoint, WebhookEvent
from ..pagination import IdCursor
from ..webhooks import (
    NotRedeliverable,
    WebhookUrlError,
    redeliver,
    register_endpoint,
    rotate_secret,
    update_endpoint,
)

ADD = "api.add_webhookendpoint"
VIEW = "api.view_webhookendpoint"
CHANGE = "api.change_webhookendpoint"
DELETE = "api.delete_webhookendpoint"
ENDPOINTS = WebhookEndpoint.objects.select_related("tenant")
URL_CHARS = 500


class WebhookEndpointSerializer(serializers.ModelSerializer):
    tenant: serializers.SlugRelatedField[Any] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )

    class Meta:
        model = WebhookEndpoint
        fields = ["id", "tenant", "url", "events", "active", "created_at"]


class WebhookBodySerializer(serializers.Serializer):
    tenant = serializers.CharField()
    url = serializers.CharField(max_length=URL_CHARS)
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=WebhookEvent.values), required=False
    )


class WebhookChangeSerializer(serializers.Serializer):
    url = serializers.CharField(max_length=URL_CHARS, required=False)
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=WebhookEvent.values), required=False
    )
    active = serializers.BooleanField(required=False)


class WebhookDeliverySerializer(serializers.ModelSerializer):
    class Meta:
        model = WebhookDelivery
        fields = [
            "id", "endpoint", "event", "run", "state", "attempts", "redeliveries", "log",
            "next_attempt_at", "delivered_at", "created_at",
        ]  # fmt: skip


SECRET = inline_serializer(
    "WebhookSecret", {"id": serializers.IntegerField(), "secret": serializers.CharField()}
)

EXAMPLE = {
    "id": 3,
    "tenant": "acme",
    "url": "https://hooks.example.com/geo",
    "events": ["run.finished"],
    "active": True,
    "created_at": "2026-11-30T10:00:00Z",
}
DELIVERY_EXAMPLE = {
    "id": 41,
    "endpoint": 3,
    "event": "run.finished",
    "run": docs.RUN_ID,
    "state": "delivered",
    "attempts": 2,
    "redeliveries": 0,
    "log": [
        {"attempt": 1, "at": 1796032800, "status": None, "error": "connection failed"},
        {"attempt": 2, "at": 1796032830, "status": 204, "error": ""},
    ],
    "next_attempt_at": None,
    "delivered_at": "2026-11-30T10:00:30Z",
    "created_at": "2026-11-30T10:00:00Z",
}
REFUSED_URL = OpenApiExample(
    "A URL that reaches inside",
    value={
        "detail": "the endpoint was not registered",
        "code": "invalid",
        "request_id": docs.REQUEST_ID,
        "errors": [{"field": "url", "message": "the host resolves to a loopback address"}],
    },
    response_only=True,
    status_codes=["400"],
)


@list_schema(
    "Webhook endpoints",
    "The caller's tenants' endpoints (operators). Secrets are not listed.",
    OpenApiExample("A page", value={"next": None, "previous": None, "results": [EXAMPLE]}),
)
class Webhooks(ScopedList):
    serializer_class = WebhookEndpointSerializer
    queryset = ENDPOINTS
    view_permission = VIEW

    @extend_schema(
        summary="Register a webhook endpoint",
        description=(
            "An https:// URL for `run.finished`, `run.needs_review` and/or `alert.fired` "
            "(empty: all of them). The "
            "host must resolve to public addresses only (no loopback, private, link-local, "
            "metadata or other special-purpose address, in any spelling). The response "
            "carries the signing `secret`, shown here once (and on the console page)."
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
            REFUSED_URL,
        ],
    )
    def post(self, request: Request) -> Response:
        require_somewhere(request.user, ADD)
        tenant, data, problems = _registration(request)
        if tenant is None or problems:
            return invalid(problems, "the endpoint was not registered")
        try:
            endpoint = register_endpoint(
                tenant=tenant, url=data["url"], events=data.get("events", [])
            )
        except WebhookUrlError as error:
            return invalid([str(error)], "the endpoint was not registered")
        out = {**WebhookEndpointSerializer(endpoint).data, "secret": endpoint.secret}
        return Response(out, status=status.HTTP_201_CREATED)


def _registration(request: Request) -> tuple[Tenant | None, dict[str, Any], list[str]]:
    body = WebhookBodySerializer(data=request.data)
    if not body.is_valid():
        return None, {}, _problems(body)
    data: dict[str, Any] = dict(body.validated_data)
    tenant = tenants_where(request.user, ADD).filter(slug=data["tenant"]).first()
    if tenant is None:
        return None, data, [f"tenant: {data['tenant']!r} is not one of your tenants"]
    return tenant, data, []


def _problems(body: serializers.Serializer) -> list[str]:
    return [f"{k}: {' '.join(map(str, v))}" for k, v in body.errors.items()]


class WebhookDetail(ApiView):
    serializer_class = WebhookEndpointSerializer
    queryset = ENDPOINTS

    @extend_schema(
        summary="Read a webhook endpoint",
        description="One endpoint of the caller's tenants (operators); the secret is not shown.",
        examples=[OpenApiExample("One", value=EXAMPLE)],
    )
    def get(self, request: Request, pk: int) -> Response:
        return Response(WebhookEndpointSerializer(self.checked_object(pk, perm=VIEW)).data)

    @extend_schema(
        summary="Change or deactivate a webhook endpoint",
        description=(
            "The fields given replace the endpoint's: `url` (checked as at registration), "
            "`events`, `active` (false: no new deliveries; true again to resume)."
        ),
        request=WebhookChangeSerializer,
        responses={200: WebhookEndpointSerializer, 400: docs.ERROR},
        examples=[
            OpenApiExample("Deactivate", value={"active": False}, request_only=True),
            OpenApiExample("Changed", value={**EXAMPLE, "active": False}, response_only=True),
        ],
    )
    def patch(self, request: Request, pk: int) -> Response:
        endpoint = self.checked_object(pk, perm=CHANGE)
        body = WebhookChangeSerializer(data=request.data)
        if not body.is_valid():
            return invalid(_problems(body), "the endpoint was not changed")
        try:
            endpoint = update_endpoint(endpoint=endpoint, **body.validated_data)
        except WebhookUrlError as error:
            return invalid([str(error)], "the endpoint was not changed")
        return Response(WebhookEndpointSerializer(endpoint).data)

    @extend_schema(
        summary="Delete a webhook endpoint",
        description="The endpoint and its delivery log are gone; nothing more is sent to it.",
        responses={204: None, 404: docs.ERROR},
        examples=[
            OpenApiExample(
                "Not one of yours",
                value={
                    "detail": "No webhook endpoint matches the given query.",
                    "code": "not_found",
                    "request_id": docs.REQUEST_ID,
                },
                response_only=True,
                status_codes=["404"],
            )
        ],
    )
    def delete(self, request: Request, pk: int) -> Response:
        self.checked_object(pk, perm=DELETE).delete()
        return Response(status=status.HTTP_204_NO_CONTENT)


class WebhookRotateSecret(ApiView):
    queryset = ENDPOINTS

    @extend_schema(
        summary="Rotate an endpoint's signing secret",
        description=(
            "A new secret, shown here once; attempts from now on are signed with it and the "
            "old one no longer verifies."
        ),
        request=None,
        responses={200: SECRET},
        examples=[OpenApiExample("Rotated", value={"id": 3, "secret": "4e7…"})],
    )
    def post(self, request: Request, pk: int) -> Response:
        endpoint = self.checked_object(pk, perm=CHANGE)
        return Response({"id": endpoint.pk, "secret": rotate_secret(endpoint=endpoint)})


class WebhookDeliveries(mixins.ListModelMixin, ApiView):
    serializer_class = WebhookDeliverySerializer
    pagination_class = IdCursor
    queryset = WebhookDelivery.objects.all()

    def get_queryset(self) -> QuerySet[WebhookDelivery]:
        if getattr(self, "swagger_fake_view", False):
            return WebhookDelivery.objects.none()
        user, pk = self.request.user, self.kwargs["pk"]
        endpoint = role_checked_get(ENDPOINTS, user, perm="api.view_webhookdelivery", pk=pk)
        return WebhookDelivery.objects.filter(endpoint_id=endpoint.pk)

    @extend_schema(
        summary="An endpoint's deliveries",
        description=(
            "Newest first, each with its state and attempt log: an HTTP status, or "
            '"refused: ..." (the URL failed its check at send time) or "connection failed".'
        ),
        examples=[
            OpenApiExample(
                "A page", value={"next": None, "previous": None, "results": [DELIVERY_EXAMPLE]}
            )
        ],
    )
    def get(self, request: Request, pk: int) -> Response:
        return self.list(request)


class WebhookRedeliver(ApiView):
    serializer_class = WebhookDeliverySerializer
    queryset = WebhookDelivery.objects.select_related("endpoint")

    @extend_schema(
        summary="Send a delivery again",
        description=(
            "A delivered or failed delivery is pending again, with a fresh set of attempts; "
            "`X-Geo-Delivery` stays the same (it is the same event). 409 while it is pending."
        ),
        request=None,
        responses={202: WebhookDeliverySerializer, 409: docs.ERROR},
        examples=[
            OpenApiExample(
                "Queued",
                value={**DELIVERY_EXAMPLE, "state": "pending", "attempts": 0, "redeliveries": 1},
                response_only=True,
                status_codes=["202"],
            )
        ],
    )
    def post(self, request: Request, pk: int, delivery_id: int) -> Response:
        delivery = self.checked_object(delivery_id, perm=CHANGE, endpoint_id=pk)
        try:
            delivery = redeliver(delivery=delivery, by=str(request.user))
        except NotRedeliverable as error:
            raise Conflict(str(error), code="delivery_pending") from None
        return Response(WebhookDeliverySerializer(delivery).data, status=status.HTTP_202_ACCEPTED)
