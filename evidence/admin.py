"""Evidence in the operator console: read-only, it is history (DESIGN.md §8).

Answer text is upstream content and is only ever shown escaped; object keys are names, not
permissions, so no download links are issued here.
"""

from __future__ import annotations

from django.contrib import admin
from django.utils.safestring import SafeString

from sampling.admin import HistoryAdmin, HistoryInline, admin_link, answer_html

from .models import Capture, Citation, EvidenceObject


class EvidenceObjectInline(HistoryInline):
    model = EvidenceObject
    fields = ("kind", "key", "sha256", "size", "mime", "created_at")


class CitationInline(HistoryInline):
    model = Citation
    fields = ("position", "url", "normalized_url", "domain", "title", "start", "end")
    show_change_link = False


@admin.register(Capture)
class CaptureAdmin(HistoryAdmin):
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
    ordering = ("-id",)
    inlines = (EvidenceObjectInline, CitationInline)
    change_form_template = "admin/evidence/capture/change_form.html"
    fields = (
        "sample_link",
        ("revision", "attempt_no", "collection_state", "status_code"),
        ("upstream_id", "captured_at", "upstream_cost", "upstream_cost_currency"),
        "warnings",
        "error",
        "answer",
    )
    readonly_fields = ("sample_link", "answer")

    @admin.display(description="sample")
    def sample_link(self, capture: Capture) -> SafeString:
        return admin_link(capture.sample)

    @admin.display(description="answer text (escaped)")
    def answer(self, capture: Capture) -> SafeString:
        return answer_html(capture.answer_text)


@admin.register(EvidenceObject)
class EvidenceObjectAdmin(HistoryAdmin):
    list_display = ("id", "kind", "key", "sha256", "size", "mime", "created_at")
    list_filter = ("kind",)
    ordering = ("-id",)
    fields = ("capture", "kind", "key", "sha256", "size", "mime", "created_at")


@admin.register(Citation)
class CitationAdmin(HistoryAdmin):
    list_display = ("id", "capture", "position", "domain", "normalized_url", "title")
    list_select_related = ("capture",)
    ordering = ("-id",)
    fields = ("capture", "position", "url", "normalized_url", "domain", "title", "start", "end")
