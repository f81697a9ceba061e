"""Token authentication: `Authorization: Bearer <token>` (or `Token <token>`), looked up by
its sha256, never stored in clear. A token works until it expires or is revoked; either answers
401 saying which (with a stable code), so an integration knows to get a new one."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q, QuerySet
from django.db.models.functions import Now
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from .models import ApiToken

TOKEN_BYTES = 32
PREFIX_CHARS = 8
# `last_used_at` is written at most this often per token: every request writing it would be
# one more UPDATE (and row version) per API call; a minute is precise enough to tell a token
# in use from a forgotten one.
LAST_USED_EVERY = timedelta(minutes=1)


class TokenLifetimeError(ValueError):
    """A lifetime outside 1 .. GEO_API_TOKEN_MAX_DAYS days."""


def digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def issue_token(*, user: Any, name: str = "", days: int | None = None) -> tuple[ApiToken, str]:
    """Make a token for `user` that expires after `days` (default GEO_API_TOKEN_DAYS); returns
    the row and the token in clear, the only time it exists in clear."""
    longest = int(settings.GEO_API_TOKEN_MAX_DAYS)
    days = int(settings.GEO_API_TOKEN_DAYS) if days is None else days
    if not 1 <= days <= longest:
        raise TokenLifetimeError(f"days: a token lives 1 to {longest} days, not {days}")
    raw = "geo_" + secrets.token_urlsafe(TOKEN_BYTES)
    token = ApiToken.objects.create(
        user=user,
        name=name,
        prefix=raw[:PREFIX_CHARS],
        digest=digest(raw),
        expires_at=Now() + timedelta(days=days),
    )
    token.refresh_from_db(fields=["created_at", "expires_at"])  # database time, as stored
    return token, raw


def new_token(*, user: Any, name: str = "", days: int | None = None) -> str:
    """Make a token for `user` and return it in clear (see `issue_token`)."""
    return issue_token(user=user, name=name, days=days)[1]


def revoke_tokens(*, tokens: QuerySet[ApiToken], by: Any) -> int:
    """Revoke the tokens of `tokens` not revoked yet (one conditional UPDATE; an earlier
    revocation keeps its time and actor). Returns how many were revoked now."""
    return tokens.filter(revoked_at=None).update(revoked_at=Now(), revoked_by=by)


def with_database_now(tokens: QuerySet[ApiToken]) -> QuerySet[ApiToken]:
    """`db_now` on each row: expiry and the last-use interval are judged in database time."""
    return tokens.annotate(db_now=Now())


def token_state(token: ApiToken) -> str:
    """ "active", "expired" or "revoked" (a row read through `with_database_now`)."""
    if token.revoked_at is not None:
        return "revoked"
    if token.expires_at <= token.db_now:  # type: ignore[attr-defined]
        return "expired"
    return "active"


def _touch(token: ApiToken) -> None:
    """Record the use, unless it was recorded less than LAST_USED_EVERY ago. The UPDATE's own
    condition keeps concurrent requests of one token to one write a minute."""
    last = token.last_used_at
    if last is not None and token.db_now - last < LAST_USED_EVERY:  # type: ignore[attr-defined]
        return
    stale = Q(last_used_at=None) | Q(last_used_at__lte=Now() - LAST_USED_EVERY)
    ApiToken.objects.filter(stale, pk=token.pk).update(last_used_at=Now())


class TokenAuthentication(authentication.BaseAuthentication):
    keywords = ("bearer", "token")

    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].decode(errors="replace").lower() not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(
                "malformed Authorization header", code="malformed_authorization"
            )
        raw = header[1].decode(errors="replace")
        token = (
            with_database_now(ApiToken.objects.select_related("user"))
            .filter(digest=digest(raw))
            .first()
        )
        if token is None:
            raise exceptions.AuthenticationFailed("invalid token", code="token_invalid")
        _refuse_unless_active(token)
        _touch(token)
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


def _refuse_unless_active(token: ApiToken) -> None:
    """401 for a revoked or expired token, or one whose user was deactivated, saying which:
    the caller holds the token, so naming its state tells them nothing they could not try."""
    state = token_state(token)
    name = f"token {token.prefix}…"
    if state == "revoked":
        raise exceptions.AuthenticationFailed(
            f"{name} was revoked at {token.revoked_at:%Y-%m-%d %H:%M:%S} UTC; make a new one",
            code="token_revoked",
        )
    if state == "expired":
        raise exceptions.AuthenticationFailed(
            f"{name} expired at {token.expires_at:%Y-%m-%d %H:%M:%S} UTC; make a new one",
            code="token_expired",
        )
    if not token.user.is_active:
        raise exceptions.AuthenticationFailed(
            f"{name} belongs to a deactivated user", code="user_inactive"
        )
