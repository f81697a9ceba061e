"""What every API view shares: token or session auth, a tenant role (console/scope.py),
per-token throttling and a capped request body."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.sessions.backends.base import SessionBase
from rest_framework import generics, permissions
from rest_framework.authentication import SessionAuthentication
from rest_framework.request import Request

from .auth import TokenAuthentication
from .errors import BodyTooLarge
from .models import ApiToken
from .services import token_session
from .throttling import TokenRateThrottle


class ApiView(generics.GenericAPIView):
    authentication_classes = [TokenAuthentication, SessionAuthentication]
    permission_classes = [permissions.IsAuthenticated]
    throttle_classes = [TokenRateThrottle]
    max_body_bytes: int | None = None  # default: settings.GEO_API_MAX_BODY_BYTES

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        limit = self.max_body_bytes or int(settings.GEO_API_MAX_BODY_BYTES)
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > limit:
            raise BodyTooLarge(f"request body is {length} bytes, over the {limit}-byte limit")
        super().initial(request, *args, **kwargs)

    def launch_session(self) -> SessionBase:
        """Where this caller's launch tokens live: the API token's own session, or the
        browser session of the browsable API."""
        if isinstance(self.request.auth, ApiToken):
            return token_session(self.request.auth)
        return self.request._request.session
