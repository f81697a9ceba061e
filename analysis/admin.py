"""Brand analysis in the operator console: read-only, it is derived history (DESIGN.md §9)."""

from __future__ import annotations

from django.contrib import admin

from sampling.admin import HistoryAdmin

from .models import Mention


@admin.register(Mention)
class MentionAdmin(HistoryAdmin):
    list_display = (
        "id",
        "sample",
        "entity",
        "is_brand",
        "mentioned",
        "count",
        "first_position",
        "rank",
        "created_at",
    )
    list_filter = ("is_brand", "mentioned")
    list_select_related = ("sample",)
    ordering = ("-id",)
