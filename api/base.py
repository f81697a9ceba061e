"""What every API view shares: token or session auth, a tenant role (tenancy/scope.py),
per-token throttling and a capped request body."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import django_filters
from django import forms
from django.conf import settings
from django.contrib.sessions.backends.base import SessionBase
from django.db.models import Model, QuerySet
from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_view
from rest_framework import generics, mixins, permissions
from rest_framework.authentication import SessionAuthentication
from rest_framework.request import Request
from rest_framework.response import Response

from tenancy.scope import require_somewhere, role_checked_get, scoped

from .auth import TokenAuthentication
from .errors import BodyTooLarge
from .models import ApiToken
from .pagination import IdCursor
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

    def finalize_response(
        self, request: Request, response: Response, *args: Any, **kwargs: Any
    ) -> Response:
        budget = getattr(request, "rate_budget", None)
        if budget is not None:
            for header, value in budget.headers().items():
                response[header] = value
        return super().finalize_response(request, response, *args, **kwargs)

    def launch_session(self) -> SessionBase:
        """Where this caller's launch tokens live: the API token's own session, or the
        browser session of the browsable API."""
        if isinstance(self.request.auth, ApiToken):
            return token_session(self.request.auth)
        return self.request._request.session

    def checked_object(self, pk: Any, *, perm: str, **options: Any) -> Any:
        """One row of the view's queryset by primary key, through the caller's role on its
        tenant (tenancy/scope.py `role_checked_get`: 404 outside their tenants, 403 when the
        role does not grant `perm`)."""
        return role_checked_get(self.get_queryset(), self.request.user, perm=perm, pk=pk, **options)


class TenantIdFilter(django_filters.NumberFilter):
    """`?tenant=<id>` compared as a number, never looked up: another tenant's id and an unknown
    one both keep no row (a model-choice filter answers 400 for an unknown id only, which tells
    an outsider which ids exist). Only a value that is not an integer is a 400, for anyone."""

    field_class = forms.IntegerField

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(field_name="tenant_id", help_text="tenant id", **kwargs)


class ScopedList(mixins.ListModelMixin, ApiView):
    """A page of the caller's tenants' rows of `queryset`: `view_permission` must be granted
    by a role somewhere, then rows are limited to the tenants (tenancy/scope.py `scoped`)."""

    pagination_class = IdCursor
    view_permission: str

    def get_queryset(self) -> QuerySet[Model]:
        require_somewhere(self.request.user, self.view_permission)
        return scoped(super().get_queryset(), self.request.user)

    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return self.list(request)


View = TypeVar("View", bound=type[ScopedList])


def list_schema(
    summary: str, description: str, *examples: OpenApiExample
) -> Callable[[View], View]:
    """The schema of a `ScopedList`'s GET: what it lists, and an example page."""
    schema = extend_schema(summary=summary, description=description, examples=list(examples))
    decorate: Callable[[View], View] = extend_schema_view(get=schema)
    return decorate
