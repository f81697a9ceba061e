"""Token authentication: `Authorization: Bearer <token>` (or `Token <token>`), looked up by
its sha256, never stored in clear."""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from django.db.models.functions import Now
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from .models import ApiToken

TOKEN_BYTES = 32
PREFIX_CHARS = 8


def digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def new_token(*, user: Any) -> str:
    """Make a token for `user` and return it: the only time it exists in clear."""
    raw = "geo_" + secrets.token_urlsafe(TOKEN_BYTES)
    ApiToken.objects.create(user=user, prefix=raw[:PREFIX_CHARS], digest=digest(raw))
    return raw


class TokenAuthentication(authentication.BaseAuthentication):
    keywords = ("bearer", "token")

    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].decode(errors="replace").lower() not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("malformed Authorization header")
        raw = header[1].decode(errors="replace")
        token = (
            ApiToken.objects.select_related("user")
            .filter(digest=digest(raw), revoked_at=None)
            .first()
        )
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed("invalid or revoked token")
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=Now())
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'
