"""Brand analysis in the operator console: results are read-only derived history
(DESIGN.md §9); ambiguous words are campaign configuration."""

from __future__ import annotations

import html

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.safestring import SafeString, mark_safe

from sampling.admin import HistoryAdmin

from .models import AmbiguousWord, AnalysisResult, AnalysisRevision, Mention


@admin.register(Mention)
class MentionAdmin(HistoryAdmin):
    list_display = (
        "id",
        "sample",
        "revision",
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
    list_filter = ("is_brand", "mentioned", "context", "sentiment", "analyser")
    list_select_related = ("sample", "revision")
    ordering = ("-id",)


@admin.register(AnalysisRevision)
class AnalysisRevisionAdmin(HistoryAdmin):
    list_display = ("id", "run", "number", "analyser", "analyser_version", "state", "expected")
    list_filter = ("analyser", "state")
    ordering = ("-id",)


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
    ordering = ("-id",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[AnalysisResult]:
        return super().get_queryset(request).exclude(review_reason="")

    @admin.display(description="sentence")
    def sentence(self, result: AnalysisResult) -> SafeString:
        return highlighted_sentence(result)


@admin.register(AmbiguousWord)
class AmbiguousWordAdmin(admin.ModelAdmin):
    """Aliases a campaign marks as everyday words (苹果, Oracle): they count only when the
    answer uses them in the brand's sense. Frozen into each new analysis revision."""

    list_display = ("campaign", "entity", "word")
    list_filter = ("campaign",)
    list_select_related = ("campaign",)
    ordering = ("campaign", "entity", "word")
