"""Brand analysis in the operator console: results are read-only derived history; mentions
filter by run, platform, entity and verdict, with totals over the filtered rows; ambiguous
words are campaign configuration."""

from __future__ import annotations

import html
from typing import Any
from uuid import UUID

from django.contrib import admin
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.safestring import SafeString, mark_safe

from analysis.models import AmbiguousWord, AnalysisResult, AnalysisRevision, Mention
from connectors.registry import known_platforms
from console.admin_base import (
    FieldValueFilter,
    HistoryAdmin,
    InternalTableMixin,
    OptionsFilter,
    TenantScopedAdmin,
)
from sampling.models import Run
from tenancy.scope import scoped


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


class VerdictFilter(OptionsFilter):
    title = "verdict"
    options = {
        "mentioned": ("Mentioned", Q(mentioned=True)),
        "not_mentioned": ("Not mentioned", Q(mentioned=False)),
    }


class MentionPlatformFilter(FieldValueFilter):
    title = "platform"
    field = "sample__platform"

    def values(self, request: HttpRequest, model_admin: Any) -> list[str]:
        return known_platforms()


class EntityFilter(FieldValueFilter):
    """The entities of the user's own mentions (bounded: the latest rows)."""

    title = "entity"
    field = "entity"

    def values(self, request: HttpRequest, model_admin: Any) -> list[str]:
        recent = model_admin.get_queryset(request).order_by("-id")[:2000]
        return sorted({name for name in recent.values_list("entity", flat=True)})


@admin.register(Mention)
class MentionAdmin(HistoryAdmin):
    list_display = (
        "id",
        "sample",
        "revision",
        "platform",
        "entity",
        "is_brand",
        "context",
        "mentioned",
        "sentiment",
        "recommended",
        "count",
        "rank",
        "analyser",
        "analyser_version",
    )
    list_filter = (
        MentionRunFilter,
        MentionPlatformFilter,
        EntityFilter,
        VerdictFilter,
        "is_brand",
        "context",
        "sentiment",
        "analyser",
    )
    search_fields = ("entity",)
    list_select_related = ("sample", "revision")
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


@admin.register(AnalysisRevision)
class AnalysisRevisionAdmin(InternalTableMixin, HistoryAdmin):
    list_display = ("id", "run", "number", "analyser", "analyser_version", "state", "expected")
    list_filter = ("analyser", "state")


def highlighted_sentence(result: AnalysisResult) -> SafeString:
    """The sentence that made the analyser unsure, escaped, with the alias matches in it
    marked (occurrence offsets index the answer text)."""
    sentence = result.review_sentence
    offset = result.capture.answer_text.find(sentence) if result.capture and sentence else -1
    spans = sorted(
        (o["start"] - offset, o["end"] - offset)
        for m in Mention.objects.filter(revision_id=result.revision_id, sample_id=result.sample_id)
        for o in m.occurrences
        if offset >= 0 and offset <= o["start"] and o["end"] <= offset + len(sentence)
    )
    pieces, last = [], 0
    for start, end in spans:
        if start >= last:
            pieces += [html.escape(sentence[last:start]), "<mark>"]
            pieces += [html.escape(sentence[start:end]), "</mark>"]
            last = end
    pieces.append(html.escape(sentence[last:]))
    return mark_safe("".join(pieces))  # noqa: S308  # built from escaped text only


@admin.register(AnalysisResult)
class AnalysisReviewAdmin(HistoryAdmin):
    """Why an analysis went to the analyst review queue, with the sentence that caused it."""

    list_display = ("id", "sample", "revision", "analyser", "review_reason", "sentence")
    list_filter = ("analyser",)
    list_select_related = ("sample", "revision", "capture")

    def get_queryset(self, request: HttpRequest) -> QuerySet[AnalysisResult]:
        return super().get_queryset(request).exclude(review_reason="")

    @admin.display(description="sentence")
    def sentence(self, result: AnalysisResult) -> SafeString:
        return highlighted_sentence(result)


@admin.register(AmbiguousWord)
class AmbiguousWordAdmin(TenantScopedAdmin):
    """Aliases a campaign marks as everyday words (苹果, Oracle): they count only when the
    answer uses them in the brand's sense. Frozen into each new analysis revision."""

    list_display = ("campaign", "entity", "word")
    list_filter = ("campaign",)
    list_select_related = ("campaign",)
    ordering = ("campaign", "entity", "word")
