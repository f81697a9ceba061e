"""Evidence in the operator console: read-only, it is history (docs/architecture.md).

Answer text is upstream content and is only ever shown escaped; object keys are names, not
permissions: every link goes through the authorised download view (evidence/downloads.py).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import nh3
from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, reverse
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from analysis.mentions import Entity, find_mentions
from analysis.selectors import analysis_review_note
from analysis.services import entities_from_snapshot
from console.admin_base import HistoryAdmin, HistoryInline, OptionsFilter, TenantScopedAdmin
from console.widgets import (
    CaptureDisplay,
    admin_link,
    citations_html,
    evidence_objects_html,
    plural,
)
from evidence.domains import registrable_domain
from evidence.models import (
    Capture,
    Citation,
    DomainCategory,
    EvidenceKind,
    EvidenceObject,
    ReviewDecision,
    ReviewDecisionKind,
    ReviewSample,
)
from evidence.sanitize import (
    ALLOWED_ATTRIBUTES,
    ALLOWED_TAGS,
    ALLOWED_URL_SCHEMES,
    LINK_REL,
    render_display_html,
)
from evidence.services import ReviewNotAllowed, decide_review, read_object
from sampling.models import AnalysisState, EvidenceState, QueueState, Sample
from sampling.snapshots import RunConfig
from sampling.transitions import PARSE_FAILED
from tenancy.scope import scoped


class EvidenceObjectInline(HistoryInline):
    model = EvidenceObject
    fields = ("kind", "key", "sha256", "size", "mime", "created_at")


class CitationInline(HistoryInline):
    model = Citation
    fields = ("position", "role", "url", "normalized_url", "domain", "title", "start", "end")
    show_change_link = False


@admin.register(Capture)
class CaptureAdmin(CaptureDisplay, HistoryAdmin):
    list_display = (
        "id",
        "sample",
        "revision",
        "attempt_no",
        "collection_state",
        "status_code",
        "captured_at",
    )
    list_filter = ("collection_state",)
    list_select_related = ("sample",)
    inlines = (EvidenceObjectInline, CitationInline)
    change_form_template = "admin/evidence/capture/change_form.html"
    fields = ("sample_link", *CaptureDisplay.capture_fields)
    readonly_fields = ("sample_link", *CaptureDisplay.capture_readonly_fields)

    @admin.display(description="sample")
    def sample_link(self, capture: Capture) -> SafeString:
        return admin_link(capture.sample)


@admin.register(EvidenceObject)
class EvidenceObjectAdmin(HistoryAdmin):
    list_display = ("id", "kind", "key", "sha256", "size", "mime", "created_at")
    list_filter = ("kind",)
    fields = ("capture", "kind", "key", "sha256", "size", "mime", "created_at")


@admin.register(Citation)
class CitationAdmin(HistoryAdmin):
    list_display = ("id", "capture", "position", "role", "domain", "normalized_url", "title")
    list_filter = ("role",)
    list_select_related = ("capture",)
    fields = ("capture", "position", "role", "url", "normalized_url", "domain", "title", "start",
              "end")  # fmt: skip


class DomainCategoryForm(forms.ModelForm):
    """The domain is kept as its registrable domain, the key citations are counted by."""

    class Meta:
        model = DomainCategory
        fields = ("tenant", "domain", "category", "note")

    def clean_domain(self) -> str:
        domain = registrable_domain(str(self.cleaned_data.get("domain") or ""))
        if domain is None:
            raise forms.ValidationError("Not a domain with a registrable part (e.g. example.com).")
        return domain


@admin.register(DomainCategory)
class DomainCategoryAdmin(TenantScopedAdmin):
    """A tenant's categories for cited domains, over the shipped classification
    (evidence/data/domain_categories.json); the campaign's own and competitor domains are
    always `own` and `competitor`."""

    form = DomainCategoryForm
    fields = ("tenant", "domain", "category", "note")
    list_display = ("domain", "category", "tenant", "note")
    list_filter = ("tenant", "category")
    list_select_related = ("tenant",)
    search_fields = ("domain",)


# --- analyst review queue -----------------------------------------------------------------

_MARK_HTML = {
    "brand": '<mark class="geo-brand">',
    "competitor": '<mark class="geo-competitor">',
}
_TAG_OR_TEXT = re.compile(r"(<[^>]*>)")


@lru_cache(maxsize=1)
def _highlight_cleaner() -> nh3.Cleaner:
    def keep(tag: str, attr: str, value: str) -> str | None:
        if tag == "mark":
            return value if value in ("geo-brand", "geo-competitor") else None
        return value

    attributes = {tag: set(attrs) for tag, attrs in ALLOWED_ATTRIBUTES.items()}
    attributes["mark"] = {"class"}
    return nh3.Cleaner(
        tags=set(ALLOWED_TAGS) | {"mark"},
        clean_content_tags={"script", "style"},
        attributes=attributes,
        attribute_filter=keep,
        strip_comments=True,
        link_rel=LINK_REL,
        url_schemes=set(ALLOWED_URL_SCHEMES),
        url_relative="deny",
    )


def highlighted_answer_html(text: str, entities: list[Entity], brand: str) -> SafeString:
    """The sanitised display copy with brand and competitor mentions marked.

    The answer is rendered and sanitised as usual first; mentions are then marked in the text
    between tags only, never inside a tag, so a brand inside a link's URL
    (`[Acme docs](https://acme.com/pricing)`) leaves the href intact. The result is sanitised
    once more (with only <mark class> of our two classes added), so the highlighting cannot
    open a hole in the allow-list."""
    rendered = render_display_html(text or "")
    parts = _TAG_OR_TEXT.split(rendered)
    marked = [
        part if part.startswith("<") else _mark_mentions(part, entities, brand) for part in parts
    ]
    return mark_safe(_highlight_cleaner().clean("".join(marked)))  # noqa: S308  # nh3 output


def _mark_mentions(escaped_text: str, entities: list[Entity], brand: str) -> str:
    """One text node of the rendered HTML with its mentions wrapped in <mark>."""
    plain = html.unescape(escaped_text)
    spans = sorted(
        (start, end, "brand" if mention.name == brand else "competitor")
        for mention in find_mentions(plain, entities).entities
        for start, end in mention.spans
    )
    if not spans:
        return escaped_text
    pieces, last = [], 0
    for start, end, kind in spans:
        if start < last:
            continue  # overlapping mentions: the first one wins
        pieces += [escape(plain[last:start]), _MARK_HTML[kind], escape(plain[start:end]), "</mark>"]
        last = end
    pieces.append(escape(plain[last:]))
    return "".join(pieces)


def review_queue(user: Any) -> QuerySet[ReviewSample]:
    """Samples awaiting a decision. One decision settles a sample: accepting or rejecting its
    analysis is made on the page that lists its partial evidence too, so partial evidence
    needs its own acknowledgement only when the analysis was never in question."""
    decided = ReviewDecision.objects.filter(sample_id=OuterRef("pk"))
    queue = ReviewSample.objects.filter(queue_state=QueueState.DONE).filter(
        Q(analysis_state=AnalysisState.REVIEW)
        | (Q(evidence_state=EvidenceState.PARTIAL) & ~Exists(decided))
    )
    return scoped(queue, user)


class ReviewReasonFilter(OptionsFilter):
    title = "why queued"
    parameter_name = "why"
    options = {
        "analysis": ("Analysis in review", Q(analysis_state=AnalysisState.REVIEW)),
        "evidence": ("Partial evidence", Q(evidence_state=EvidenceState.PARTIAL)),
    }


@admin.register(ReviewSample)
class ReviewSampleAdmin(HistoryAdmin):
    """Samples an analyst must look at; accept / reject go through the state machine."""

    count_noun = ("sample in the review queue", "samples in the review queue")
    list_display = (
        "id",
        "run_short",
        "platform",
        "question",
        "evidence_state",
        "analysis_state",
        "reasons",
        "updated_at",
    )
    list_display_links = ("id", "question")
    list_filter = (ReviewReasonFilter, "platform", "evidence_state", "analysis_state")
    ordering = ("id",)
    change_list_template = "admin/evidence/reviewsample/change_list.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet[ReviewSample]:
        return review_queue(request.user).select_related("question_revision")

    @admin.display(description="run")
    def run_short(self, sample: Sample) -> str:
        return str(sample.run_id)[:8]

    @admin.display(description="question")
    def question(self, sample: Sample) -> str:
        text = sample.question_revision.text
        return text[:60] + ("…" if len(text) > 60 else "")

    @admin.display(description="reasons")
    def reasons(self, sample: Sample) -> str:
        return "; ".join(reason.plain for reason in review_reasons(sample)) or "—"

    actions = ("accept_selected", "reject_selected", "acknowledge_selected")
    # A decision is a review decision added, by the role in each selected sample's tenant
    # (console/admin_base.py narrows the selection to those rows and records who decided).
    action_permissions = {"decide": "evidence.add_reviewdecision"}

    def has_decide_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.role_allows(request, "evidence.add_reviewdecision", obj)

    def get_urls(self) -> list[URLPattern]:
        return [self.object_url("decide", self.decide_view), *super().get_urls()]

    def change_view(self, request: HttpRequest, object_id: str, *_: Any, **__: Any) -> HttpResponse:
        """The review page replaces the change form (nothing here is edited as a form). A
        sample decided already (or never queued) in the reader's scope is shown as it stands,
        with its decisions and without a form: a link to it keeps working."""
        try:
            sample = self._queued(request, object_id)
            queued = True
        except Http404:
            sample = self._in_scope(request, object_id)
            queued = False
        context = _review_context(request, sample)
        if not queued:
            context.update(queued=False, can_accept=False, can_reject=False, can_acknowledge=False)
        return TemplateResponse(
            request,
            "admin/evidence/reviewsample/detail.html",
            {**self.admin_site.each_context(request), **context},
        )

    def _in_scope(self, request: HttpRequest, object_id: str) -> ReviewSample:
        pk = _int_or_none(unquote(object_id))
        queryset = scoped(ReviewSample.objects.select_related("question_revision"), request.user)
        sample = queryset.filter(pk=pk).first() if pk is not None else None
        if sample is None:
            raise Http404("no such sample")
        if not self.has_view_permission(request, sample):
            raise PermissionDenied
        return sample

    def _decide_selected(
        self, request: HttpRequest, queryset: QuerySet[ReviewSample], decision: str
    ) -> None:
        """One decision per selected sample; a sample it cannot settle is named, not hidden."""
        done, refused = 0, []
        for sample in queryset:
            try:
                decide_review(sample_id=sample.pk, decision=decision, reviewer_id=request.user.pk)
                done += 1
            except ReviewNotAllowed as error:
                refused.append(f"sample {sample.pk}: {error}")
        if done:
            self.message_user(request, f"{plural(done, 'sample')} {decision}.", messages.SUCCESS)
        for reason in refused:
            self.message_user(request, reason, messages.WARNING)

    @admin.action(description="Accept the analysis of the selected samples", permissions=["decide"])
    def accept_selected(self, request: HttpRequest, queryset: QuerySet[ReviewSample]) -> None:
        self._decide_selected(request, queryset, ReviewDecisionKind.ACCEPTED)

    @admin.action(description="Reject the selected samples", permissions=["decide"])
    def reject_selected(self, request: HttpRequest, queryset: QuerySet[ReviewSample]) -> None:
        self._decide_selected(request, queryset, ReviewDecisionKind.REJECTED)

    @admin.action(
        description="Acknowledge the partial evidence of the selected samples",
        permissions=["decide"],
    )
    def acknowledge_selected(self, request: HttpRequest, queryset: QuerySet[ReviewSample]) -> None:
        self._decide_selected(request, queryset, ReviewDecisionKind.ACKNOWLEDGED)

    def _queued(self, request: HttpRequest, object_id: str) -> ReviewSample:
        pk = _int_or_none(unquote(object_id))
        sample = self.get_queryset(request).filter(pk=pk).first() if pk is not None else None
        if sample is None:
            raise Http404("not in the review queue")
        if not self.has_view_permission(request, sample):
            raise PermissionDenied
        return sample

    def decide_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        sample = self._queued(request, object_id)
        if not self.role_allows(request, "evidence.add_reviewdecision", sample):
            raise PermissionDenied
        decision = request.POST.get("decision", "")
        try:
            decide_review(
                sample_id=sample.pk,
                decision=decision,
                reviewer_id=request.user.pk,
                note=request.POST.get("note", ""),
            )
        except ReviewNotAllowed as error:
            messages.error(request, str(error))
            return redirect("admin:evidence_reviewsample_change", sample.pk)
        messages.success(request, f"sample {sample.pk}: {decision}")
        return redirect("admin:evidence_reviewsample_changelist")


def _int_or_none(value: str) -> int | None:
    return int(value) if value.isdigit() else None


@dataclass(frozen=True)
class ReviewReason:
    """Why a sample is queued: a sentence for the analyst, the recorded string folded away."""

    plain: str
    detail: str


def _unparsed(sample: Sample) -> bool:
    return sample.analysis_reason.startswith(PARSE_FAILED)


def review_reasons(sample: Sample) -> list[ReviewReason]:
    reasons = []
    if sample.analysis_state == AnalysisState.REVIEW:
        if _unparsed(sample):
            reasons.append(
                ReviewReason(
                    "The platform's answer could not be read, so nothing was analysed: its raw "
                    "body is below. Reject it, or re-parse it once the parser is fixed.",
                    sample.analysis_reason,
                )
            )
        else:
            note = analysis_review_note(sample_id=sample.pk) or sample.validity_reason
            reasons.append(
                ReviewReason(
                    "The analysis is unsure about this answer: check the marked mentions, "
                    "then accept or reject it.",
                    note or sample.analysis_reason,
                )
            )
    if sample.evidence_state == EvidenceState.PARTIAL and not _unparsed(sample):
        reasons.append(
            ReviewReason(
                "Part of the evidence is missing (the screenshot or the citations, say); the "
                "answer itself counts.",
                sample.evidence_reason or "no reason recorded",
            )
        )
    return reasons


RAW_SHOWN = 20_000  # characters of a raw body shown inline; the whole one is a download


def _raw_body(capture: Capture | None) -> str:
    """The raw response as received, decoded for reading (escaped by the template)."""
    raw = capture.evidence_objects.filter(kind=EvidenceKind.RAW).first() if capture else None
    if raw is None:
        return ""
    text = read_object(key=raw.key).decode("utf-8", errors="replace")
    return text if len(text) <= RAW_SHOWN else text[:RAW_SHOWN] + "\n… (cut; download it whole)"


def _review_context(request: HttpRequest, sample: ReviewSample) -> dict[str, Any]:
    capture = (
        Capture.objects.filter(sample_id=sample.pk, collection_state="completed")
        .order_by("-revision")
        .first()
    )
    config = RunConfig.of(sample.run)
    entities = entities_from_snapshot(config)
    brand = config.brand.name
    objects = {o.kind: o for o in capture.evidence_objects.all()} if capture is not None else {}
    screenshot, thumbnail = (
        objects.get(EvidenceKind.SCREENSHOT),
        objects.get(EvidenceKind.THUMBNAIL),
    )
    return {
        "title": f"Review sample {sample.pk}",
        "opts": ReviewSample._meta,
        "sample": sample,
        "capture": capture,
        "reasons": review_reasons(sample),
        "queued": True,
        "raw_body": _raw_body(capture) if _unparsed(sample) else "",
        "warnings": capture.warnings if capture is not None else [],
        "answer": highlighted_answer_html(capture.answer_text, entities, brand)
        if capture is not None
        else None,
        "citations": citations_html(capture) if capture is not None else None,
        "objects": evidence_objects_html(capture) if capture is not None else None,
        "mentions": list(capture.mentions.order_by("rank", "entity")) if capture else [],
        "screenshot_url": reverse("evidence:download", args=[screenshot.pk]) if screenshot else "",
        "thumbnail_url": reverse("evidence:download", args=[thumbnail.pk]) if thumbnail else "",
        "decisions": list(sample.review_decisions.select_related("reviewer")),
        # Only what can succeed: an unread answer or one without text has nothing to accept.
        "can_accept": sample.analysis_state == AnalysisState.REVIEW
        and not _unparsed(sample)
        and capture is not None
        and bool(capture.answer_text),
        "can_reject": sample.analysis_state == AnalysisState.REVIEW,
        "can_acknowledge": sample.analysis_state != AnalysisState.REVIEW
        and sample.evidence_state == EvidenceState.PARTIAL,
        "decide_url": reverse("admin:evidence_reviewsample_decide", args=[sample.pk]),
        "sample_url": reverse("admin:sampling_sample_change", args=[sample.pk]),
    }


@admin.register(ReviewDecision)
class ReviewDecisionAdmin(HistoryAdmin):
    list_display = (
        "id",
        "sample",
        "decision",
        "reviewer",
        "analysis_state_before",
        "analysis_state_after",
        "created_at",
    )
    list_filter = ("decision",)
    list_select_related = ("sample", "reviewer")
