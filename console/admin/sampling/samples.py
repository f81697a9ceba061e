"""Samples: filters (run, batch, platform, states, validity, failure reason), the sample page
with its attempts, captures (screenshot, downloads), mentions and review decisions, and the
resolve-uncertain actions."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from analysis.models import Mention
from connectors.registry import known_platforms
from console.admin_base import HistoryAdmin, HistoryInline, ReadOnlyMixin, ScopedStackedInline
from console.widgets import (
    CaptureDisplay,
    admin_link,
    layer_display,
    muted,
    plural,
    screenshot_html,
)
from evidence.models import Capture, ReviewDecision
from pipeline.review import NotResolvable, Resolution, resolve_uncertain
from sampling.models import AnalysisState, Attempt, Batch, CollectionState, Run, Sample, StaleWrite
from tenancy.scope import scoped


def _uuid_or_none(value: str) -> UUID | None:
    try:
        return UUID(value)
    except ValueError:
        return None


class RunSampleFilter(admin.SimpleListFilter):
    """By run, without listing every run ever made: the selected run and the latest few."""

    title = "run"
    parameter_name = "run"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        visible = scoped(Run.objects.select_related("campaign"), request.user)
        runs = list(visible.order_by("-created_at")[:10])
        selected = _uuid_or_none(self.value() or "")
        if selected is not None and all(run.pk != selected for run in runs):
            runs.extend(visible.filter(pk=selected))
        return [(str(run.pk), f"{str(run.pk)[:8]} · {run.campaign.name}") for run in runs]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value():
            return queryset.filter(run_id=_uuid_or_none(self.value() or ""))
        return queryset


class BatchSampleFilter(admin.SimpleListFilter):
    """Reached from a run's batch table; shown only while active."""

    title = "batch"
    parameter_name = "batch"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        batches = scoped(Batch.objects.all(), request.user)
        batch = batches.filter(pk=value).first() if value and value.isdigit() else None
        return [(str(batch.pk), str(batch))] if batch else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value:
            return queryset.filter(batch_id=int(value) if value.isdigit() else 0)
        return queryset


class PlatformFilter(admin.SimpleListFilter):
    """Choices from the connector registry: no DISTINCT scan over the samples table."""

    title = "platform"
    parameter_name = "platform"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(p, p) for p in known_platforms()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(platform=self.value()) if self.value() else queryset


class ValidityFilter(admin.SimpleListFilter):
    title = "validity"
    parameter_name = "validity"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("valid", "valid"), ("invalid", "invalid"), ("unset", "not checked yet")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == "unset":
            return queryset.filter(validity="")
        return queryset.filter(validity=value) if value else queryset


class FailureReasonFilter(admin.SimpleListFilter):
    """The failure reasons of the selected run (or the latest failures), as recorded."""

    title = "failure reason"
    parameter_name = "failure_reason"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        failed = model_admin.get_queryset(request).filter(collection_state=CollectionState.FAILED)
        run = _uuid_or_none(request.GET.get("run", ""))
        if run is not None:
            failed = failed.filter(run_id=run)
        reasons = failed.order_by("-id").values_list("failure_reason", flat=True)[:500]
        return [(r, r[:60]) for r in sorted(set(reasons)) if r]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(failure_reason=value) if value else queryset


class AttemptInline(HistoryInline):
    model = Attempt
    fields = (
        "attempt_no",
        "status",
        "error_class",
        "status_code",
        "error_message",
        "upstream_id",
        "request_id",
        "egress",
        "retry_after_seconds",
        "fencing_token",
        "started_at",
        "finished_at",
    )


class CaptureInline(CaptureDisplay, ReadOnlyMixin, ScopedStackedInline):
    model = Capture
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = True
    fields = (*CaptureDisplay.capture_fields, "search_query_list", "citation_list")
    readonly_fields = (
        *CaptureDisplay.capture_readonly_fields, "search_query_list", "citation_list",
    )  # fmt: skip

    def get_queryset(self, request: HttpRequest) -> QuerySet[Capture]:
        return (
            super()
            .get_queryset(request)
            .prefetch_related("evidence_objects", "citations", "search_queries")
        )


class MentionInline(HistoryInline):
    model = Mention
    fields = ("revision", "entity", "context", "mentioned", "sentiment", "rank", "capture")
    show_change_link = False


class StaleWriteInline(HistoryInline):
    model = StaleWrite
    fields = ("operation", "presented_token", "current_token", "worker", "created_at")
    show_change_link = False


def _layer_column(layer: str) -> Any:
    @admin.display(description=layer, ordering=f"{layer}_state")
    def column(self: SampleAdmin, sample: Sample) -> str:
        return layer_display(sample, layer)

    column.__name__ = f"{layer}_display"
    return column


@admin.register(Sample)
class SampleAdmin(HistoryAdmin):
    list_display = (
        "id",
        "run_short",
        "question",
        "platform",
        "device",
        "region",
        "mode",
        "repeat_index",
        "submission_state",
        "collection_state",
        "evidence_display",
        "analysis_display",
        "queue_state",
        "validity",
        "failure_reason",
        "updated_at",
    )
    list_select_related = ("question_revision",)
    list_filter = (
        RunSampleFilter,
        BatchSampleFilter,
        PlatformFilter,
        "submission_state",
        "collection_state",
        "evidence_state",
        "analysis_state",
        "queue_state",
        ValidityFilter,
        FailureReasonFilter,
    )
    search_fields = ("=id", "upstream_id", "failure_reason")
    inlines = (AttemptInline, CaptureInline, MentionInline, StaleWriteInline)
    actions = ("resolve_not_executed", "resolve_abandon")
    change_form_template = "admin/sampling/sample/change_form.html"
    change_list_template = "admin/sampling/sample/change_list.html"
    fieldsets = (
        (
            "Identity",
            {
                "fields": (
                    "run_link",
                    "batch",
                    "tenant",
                    "question_text",
                    ("platform", "device", "region", "mode", "repeat_index"),
                )
            },
        ),
        (
            "State",
            {
                "fields": (
                    ("submission_state", "collection_state", "evidence_layer", "analysis_layer"),
                    "brand_mention",
                    ("validity", "validity_reason"),
                    "evidence_reason",
                    "failure_reason",
                    "review",
                    "latest_screenshot",
                )
            },
        ),
        (
            "Execution",
            {
                "fields": (
                    ("step", "queue_state", "priority", "due_at"),
                    ("lease_owner", "lease_until", "fencing_token"),
                    ("attempts", "claims"),
                    ("upstream_id", "accepted_at", "completed_at", "updated_at"),
                )
            },
        ),
    )
    readonly_fields = (
        "run_link",
        "question_text",
        "brand_mention",
        "evidence_layer",
        "analysis_layer",
        "review",
        "latest_screenshot",
    )

    evidence_display = _layer_column("evidence")
    analysis_display = _layer_column("analysis")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Sample]:
        return super().get_queryset(request).select_related("question_revision")

    action_permissions = {"resolve": "change"}

    def has_resolve_permission(self, request: HttpRequest, sample: Sample | None = None) -> bool:
        """Resolving is a change of the sample, by the role in the sample's own tenant."""
        return self.role_allows(request, "change", sample)

    @admin.display(description="run", ordering="run_id")
    def run_short(self, sample: Sample) -> str:
        return str(sample.run_id)[:8]

    @admin.display(description="question")
    def question(self, sample: Sample) -> str:
        revision = sample.question_revision
        text = revision.text
        return f"r{revision.revision_no} {text[:50]}{'…' if len(text) > 50 else ''}"

    @admin.display(description="run")
    def run_link(self, sample: Sample) -> SafeString:
        return admin_link(sample.run)

    @admin.display(description="question revision")
    def question_text(self, sample: Sample) -> str:
        revision = sample.question_revision
        return f"r{revision.revision_no} (question {revision.question_id}): {revision.text}"

    @admin.display(description="evidence state")
    def evidence_layer(self, sample: Sample) -> SafeString:
        return _terminal_or_plain(sample, "evidence")

    @admin.display(description="analysis state")
    def analysis_layer(self, sample: Sample) -> SafeString:
        return _terminal_or_plain(sample, "analysis")

    @admin.display(description="brand mentioned")
    def brand_mention(self, sample: Sample) -> str:
        if sample.collection_state == CollectionState.FAILED:
            return f"not analysed: the answer was never collected ({sample.failure_reason})"
        # While analysis is pending nothing is known yet: say so, never "not mentioned".
        if sample.analysis_state == AnalysisState.PENDING:
            return "analysing"
        brand = sample.mentions.filter(is_brand=True).order_by("-capture__revision").first()
        if brand is None:
            return f"no analysis recorded ({sample.analysis_state})"
        if not brand.mentioned:
            return f"not mentioned ({sample.analysis_state})"
        return (
            f"mentioned {brand.count}×, first at {brand.first_position} ({sample.analysis_state})"
        )

    @admin.display(description="review decisions")
    def review(self, sample: Sample) -> SafeString:
        decisions = ReviewDecision.objects.filter(sample_id=sample.pk).select_related("reviewer")
        rows = [
            (d.created_at.strftime("%Y-%m-%d %H:%M"), d.get_decision_display(), d.reviewer, d.note)
            for d in decisions.order_by("created_at")
        ]
        if not rows:
            return muted("no review decision")
        return format_html(
            '<ul class="geo-decisions">{}</ul>',
            format_html_join("", "<li>{}: <strong>{}</strong> by {} {}</li>", rows),
        )

    @admin.display(description="screenshot")
    def latest_screenshot(self, sample: Sample) -> SafeString:
        capture = (
            Capture.objects.filter(sample_id=sample.pk)
            .prefetch_related("evidence_objects")
            .order_by("-revision")
            .first()
        )
        return screenshot_html(capture)

    @admin.action(
        description="Resolve uncertain: not executed upstream, ask again",
        permissions=["resolve"],
    )
    def resolve_not_executed(self, request: HttpRequest, queryset: QuerySet[Sample]) -> None:
        self._resolve(request, queryset, Resolution.NOT_EXECUTED)

    @admin.action(
        description="Resolve uncertain: abandon, keep as a failed placeholder",
        permissions=["resolve"],
    )
    def resolve_abandon(self, request: HttpRequest, queryset: QuerySet[Sample]) -> None:
        self._resolve(request, queryset, Resolution.ABANDON)

    def _resolve(
        self, request: HttpRequest, queryset: QuerySet[Sample], resolution: Resolution
    ) -> None:
        done = 0
        for sample_id in queryset.values_list("id", flat=True):
            try:
                resolve_uncertain(
                    sample_id=sample_id, resolution=resolution, note=f"by {request.user}"
                )
                done += 1
            except NotResolvable as error:
                self.message_user(request, str(error), messages.WARNING)
        if done:
            self.message_user(request, f"{plural(done, 'sample')} resolved as {resolution.value}.")


def _terminal_or_plain(sample: Sample, layer: str) -> SafeString:
    text = layer_display(sample, layer)
    if text != getattr(sample, f"{layer}_state"):
        return format_html('<span class="geo-terminal">{}</span>', text)
    return format_html("{}", text)
