"""Brand analysis in the operator console: read-only, it is derived history.
Mentions filter by run, platform, entity and verdict, with totals over the filtered rows."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.contrib import admin
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from connectors.registry import known_platforms
from console.admin_base import HistoryAdmin
from console.scope import scoped
from sampling.models import Run

from .models import Mention


class MentionRunFilter(admin.SimpleListFilter):
    title = "run"
    parameter_name = "run"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        runs = scoped(Run.objects.select_related("campaign"), request.user)[:15]
        return [(str(run.pk), f"{str(run.pk)[:8]} · {run.campaign.name}") for run in runs]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        try:
            return queryset.filter(sample__run_id=UUID(value))
        except ValueError:
            return queryset.none()


class MentionPlatformFilter(admin.SimpleListFilter):
    title = "platform"
    parameter_name = "platform"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(p, p) for p in known_platforms()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(sample__platform=self.value()) if self.value() else queryset


class EntityFilter(admin.SimpleListFilter):
    """The entities of the user's own mentions (bounded: the latest rows)."""

    title = "entity"
    parameter_name = "entity"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        recent = model_admin.get_queryset(request).order_by("-id")[:2000]
        names = sorted({name for name in recent.values_list("entity", flat=True)})
        return [(name, name) for name in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(entity=self.value()) if self.value() else queryset


class VerdictFilter(admin.SimpleListFilter):
    title = "verdict"
    parameter_name = "verdict"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("mentioned", "Mentioned"), ("not_mentioned", "Not mentioned")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() in ("mentioned", "not_mentioned"):
            return queryset.filter(mentioned=self.value() == "mentioned")
        return queryset


@admin.register(Mention)
class MentionAdmin(HistoryAdmin):
    list_display = (
        "id",
        "sample",
        "platform",
        "entity",
        "is_brand",
        "mentioned",
        "count",
        "first_position",
        "rank",
        "created_at",
    )
    list_filter = (
        MentionRunFilter,
        MentionPlatformFilter,
        EntityFilter,
        VerdictFilter,
        "is_brand",
    )
    search_fields = ("entity",)
    list_select_related = ("sample",)
    ordering = ("-id",)
    change_list_template = "admin/analysis/mention/change_list.html"

    @admin.display(description="platform", ordering="sample__platform")
    def platform(self, mention: Mention) -> str:
        return mention.sample.platform

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        response = super().changelist_view(request, extra_context)
        if isinstance(response, TemplateResponse) and response.context_data:
            changelist = response.context_data.get("cl")
            if changelist is not None:
                response.context_data["mention_totals"] = changelist.queryset.aggregate(
                    total_rows=Count("id"),
                    total_mentioned=Count("id", filter=Q(mentioned=True)),
                    total_not_mentioned=Count("id", filter=Q(mentioned=False)),
                )
        return response
