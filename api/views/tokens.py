"""The caller's own API tokens: list them (with expiry and last use) and revoke one. A token
belongs to a person, not to a tenant: the rows are the caller's by user id, another person's
token is a 404 (superusers manage everyone's in the console). Tokens are made with
`manage.py api_token` or in the console, never by a token: a stolen token must not be able to
outlive its own expiry by minting successors."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import mixins, serializers
from rest_framework.generics import get_object_or_404
from rest_framework.request import Request
from rest_framework.response import Response

from .. import schema_docs as docs
from ..auth import revoke_tokens, token_state, with_database_now
from ..base import ApiView
from ..models import ApiToken
from ..pagination import IdCursor


class ApiTokenSerializer(serializers.ModelSerializer):
    state = serializers.SerializerMethodField(help_text="active, expired or revoked")
    current = serializers.SerializerMethodField(help_text="the token of this request")

    class Meta:
        model = ApiToken
        fields = [
            "id", "name", "prefix", "state", "current", "created_at", "expires_at",
            "last_used_at", "revoked_at",
        ]  # fmt: skip

    def get_state(self, token: ApiToken) -> str:
        return token_state(token)

    def get_current(self, token: ApiToken) -> bool:
        auth = self.context["request"].auth
        return isinstance(auth, ApiToken) and auth.pk == token.pk


EXAMPLE = {
    "id": 12,
    "name": "nightly export",
    "prefix": "geo_3fQx",
    "state": "active",
    "current": True,
    "created_at": "2026-09-01T08:00:00Z",
    "expires_at": "2026-11-30T08:00:00Z",
    "last_used_at": "2026-11-29T02:00:41Z",
    "revoked_at": None,
}
UNAUTHORIZED = OpenApiExample(
    "Expired",
    value={"detail": "token geo_3fQx… expired at 2026-11-30 08:00:00 UTC; make a new one"},
    response_only=True,
    status_codes=["401"],
)


class _OwnTokens(ApiView):
    serializer_class = ApiTokenSerializer

    def get_queryset(self) -> QuerySet[ApiToken]:
        if getattr(self, "swagger_fake_view", False):
            return ApiToken.objects.none()
        person: Any = self.request.user  # IsAuthenticated ran first: never AnonymousUser
        return with_database_now(ApiToken.objects.filter(user=person))


class ApiTokens(mixins.ListModelMixin, _OwnTokens):
    pagination_class = IdCursor

    @extend_schema(
        summary="Your API tokens",
        description=(
            "Every token of the caller, newest first: its state (`active`, `expired`, "
            "`revoked`), when it expires, when it was last used (recorded at most once a "
            "minute) and whether it is the one of this request. An expired or revoked token "
            "answers 401 with a message saying which."
        ),
        responses={200: ApiTokenSerializer(many=True), 401: docs.ERROR},
        examples=[
            OpenApiExample("A page", value={"next": None, "previous": None, "results": [EXAMPLE]}),
            UNAUTHORIZED,
        ],
    )
    def get(self, request: Request) -> Response:
        return self.list(request)


class ApiTokenRevoke(_OwnTokens):
    @extend_schema(
        summary="Revoke one of your API tokens",
        description=(
            'From now on the token answers 401 ("revoked"). Revoking the token of this very '
            "request is allowed (it is its last call); revoking again changes nothing."
        ),
        request=None,
        responses={200: ApiTokenSerializer, 401: docs.ERROR, 404: docs.ERROR},
        examples=[
            OpenApiExample(
                "Revoked",
                value={**EXAMPLE, "state": "revoked", "revoked_at": "2026-11-29T09:12:00Z"},
                response_only=True,
                status_codes=["200"],
            )
        ],
    )
    def post(self, request: Request, pk: int) -> Response:
        mine = self.get_queryset()
        token: Any = get_object_or_404(mine, pk=pk)
        revoke_tokens(tokens=mine.filter(pk=token.pk), by=request.user)
        return Response(self.get_serializer(mine.get(pk=token.pk)).data)
