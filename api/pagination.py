from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as ModelValidationError
from django.db.models import QuerySet
from rest_framework.exceptions import NotFound, ValidationError
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

    def get_page_size(self, request: Request) -> int:
        given = request.query_params.get(self.page_size_query_param or "page_size")
        if given is None:
            return self.page_size
        if not (given.isascii() and given.isdecimal() and len(given) <= 6) or int(given) < 1:
            # DRF falls back to the default, silently: the caller asked for something else.
            raise ValidationError(
                {
                    "page_size": [
                        f"a whole number from 1 to {self.max_page_size}, not {given[:20]!r}"
                    ]
                }
            )
        return min(int(given), self.max_page_size or int(given))

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters: list[dict[str, Any]] = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_size_query_param:
                parameter["schema"] = {"type": "integer", "minimum": 1}
                parameter["description"] = (
                    f"Rows per page (1 to {self.max_page_size}; more: the most)."
                )
        return parameters

    def decode_cursor(self, request: Request) -> Cursor | None:
        try:
            return super().decode_cursor(request)
        except NotFound:
            raise _bad_cursor() from None

    def paginate_queryset(
        self, queryset: QuerySet[Any, Any], request: Request, view: Any = None
    ) -> list[Any] | None:
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
