from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as ModelValidationError
from django.db.models import Model, QuerySet
from rest_framework.exceptions import NotFound
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request

from .errors import BadCursor

BAD_CURSOR = "the cursor is not one this API gave out; start again without it"


class IdCursor(CursorPagination):
    """Opaque cursors over a unique, stable order: a page never repeats or skips a row that
    existed when the walk started, however many rows arrive meanwhile. A cursor that is not
    one of ours (DRF's signature-less base64 can be crafted) is a 400, never a 500."""

    ordering = "-id"
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000

    def decode_cursor(self, request: Request) -> Cursor | None:
        try:
            return super().decode_cursor(request)
        except NotFound:
            raise _bad_cursor() from None

    def paginate_queryset(
        self, queryset: QuerySet[Model], request: Request, view: Any = None
    ) -> list[Model] | None:
        try:
            # The position is compared with the ordering column: a crafted one that is not of
            # its type fails when the filter is built.
            return super().paginate_queryset(queryset, request, view)
        except (ModelValidationError, ValueError, TypeError, OverflowError):
            raise _bad_cursor() from None


def _bad_cursor() -> BadCursor:
    return BadCursor({"cursor": [BAD_CURSOR]})


class AscendingIdCursor(IdCursor):
    ordering = "id"


class NewestFirstCursor(IdCursor):
    ordering = "-created_at"
