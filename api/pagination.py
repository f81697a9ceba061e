from __future__ import annotations

from rest_framework.pagination import CursorPagination


class IdCursor(CursorPagination):
    """Opaque cursors over a unique, stable order: a page never repeats or skips a row that
    existed when the walk started, however many rows arrive meanwhile."""

    ordering = "-id"
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000


class AscendingIdCursor(IdCursor):
    ordering = "id"


class NewestFirstCursor(IdCursor):
    ordering = "-created_at"
