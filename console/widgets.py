"""HTML pieces every app's admin shows: links, escaped JSON and answers, evidence and citation
tables, money, status badges. Upstream text is untrusted: everything here escapes it."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.db import models
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from billing.services import format_amount
from evidence.models import Capture, EvidenceKind
from sampling.models import AnalysisState, CollectionState, EvidenceState, Sample, SubmissionState
from sampling.selectors import Outcome, Status

OUTCOME_LABELS: dict[Outcome, str] = {
    Outcome.IN_PROGRESS: "In progress",
    Outcome.ALL_SUCCEEDED: "All succeeded",
    Outcome.PARTIALLY_SUCCEEDED: "Partially succeeded",
    Outcome.ALL_FAILED: "All failed",
    Outcome.CANCELLED: "Cancelled",
    Outcome.EMPTY: "No samples",
}
LAYER_STATES: dict[str, list[str]] = {
    "submission": list(SubmissionState.values),
    "collection": list(CollectionState.values),
    "evidence": list(EvidenceState.values),
    "analysis": list(AnalysisState.values),
}
# Bar segments in display order; the remainder of the bar is pending work.
# What a person reads: failed without the cancelled samples, which are a bucket of their own
# (sampling.selectors.Status); together they partition the planned samples.
STATUS_SEGMENTS = ("succeeded", "review", "invalid", "failed", "cancelled", "pending")
_SEGMENT_FIELDS = {"failed": "failed_not_cancelled"}


def plural(n: int, word: str, many: str = "") -> str:
    """`1 run`, `2 runs` (`many` for the words that do not take an s)."""
    return f"{n} {word}" if n == 1 else f"{n} {many or word + 's'}"


def muted(text: str) -> SafeString:
    return format_html('<span class="geo-muted">{}</span>', text)


def admin_link(obj: models.Model, label: object = None) -> SafeString:
    opts = obj._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])
    return format_html('<a href="{}">{}</a>', url, obj if label is None else label)


def samples_url(**filters: object) -> str:
    return f"{reverse('admin:sampling_sample_changelist')}?{urlencode(filters)}"


def money(amount: int | None, currency: str) -> str:
    """Minor units in code, major units with the currency code on screen."""
    return "–" if amount is None or not currency else format_amount(amount, currency)


def pretty_json(value: Any) -> SafeString:
    """Snapshots hold operator-typed and upstream text: always escaped, never marked safe."""
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    return format_html('<pre class="geo-json">{}</pre>', text)


def answer_html(text: str) -> SafeString:
    """Upstream answers are untrusted HTML/Markdown: shown escaped, as plain text."""
    if not text:
        return muted("(no answer text)")
    return format_html('<div class="geo-answer">{}</div>', text)


def _safe_href(url: str) -> str | None:
    return url if url.lower().startswith(("https://", "http://")) else None


def download_url(object_id: int, *, attachment: bool = False) -> str:
    url = reverse("evidence:download", args=[object_id])
    return f"{url}?download=1" if attachment else url


def evidence_objects_html(capture: Capture) -> SafeString:
    """The stored objects, each downloadable through the authorised download view."""
    rows = format_html_join(
        "",
        "<tr><td>{}</td><td><a href='{}' class='geo-download'>download</a></td>"
        "<td><code>{}</code></td><td><code>{}</code></td><td>{}</td><td>{}</td></tr>",
        (
            (o.kind, download_url(o.pk, attachment=True), o.key, o.sha256, o.size, o.mime)
            for o in capture.evidence_objects.all()
        ),
    )
    if not rows:
        return muted("no stored objects")
    return format_html(
        '<table class="geo-table"><thead><tr><th>kind</th><th></th><th>key</th><th>sha256</th>'
        "<th>bytes</th><th>MIME</th></tr></thead><tbody>{}</tbody></table>",
        rows,
    )


def screenshot_html(capture: Capture | None) -> SafeString:
    """The thumbnail inline, linking to the full screenshot (both through the download view)."""
    objects = {o.kind: o for o in capture.evidence_objects.all()} if capture else {}
    full, thumb = objects.get(EvidenceKind.SCREENSHOT), objects.get(EvidenceKind.THUMBNAIL)
    if full is None:
        return muted("no screenshot stored")
    return format_html(
        '<a href="{}" class="geo-screenshot" target="_blank" rel="noopener">'
        '<img src="{}" alt="screenshot of the answer" class="geo-thumb"></a>',
        download_url(full.pk),
        download_url((thumb or full).pk),
    )


def citations_html(capture: Capture) -> SafeString:
    items = []
    for c in capture.citations.all():
        href = _safe_href(c.url)
        url = (
            format_html('<a href="{}" rel="noopener noreferrer nofollow">{}</a>', href, c.url)
            if href
            else format_html("<code>{}</code>", c.url)
        )
        span = "–" if c.start is None else f"{c.start}–{c.end}"
        items.append((c.position, c.get_role_display(), url, c.normalized_url, c.domain, c.title,
                      span))  # fmt: skip
    if not items:
        return muted("no citations")
    rows = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td>"
        "<td>{}</td></tr>",
        items,
    )
    return format_html(
        '<table class="geo-table"><thead><tr><th>#</th><th>role</th><th>URL</th>'
        "<th>normalized</th><th>domain</th><th>title</th><th>span</th></tr></thead><tbody>{}</tbody></table>",
        rows,
    )


def search_queries_html(capture: Capture) -> SafeString:
    """The web searches the engine ran for this answer (query fan-out), in order."""
    queries = [(q.position + 1, q.query) for q in capture.search_queries.all()]
    if not queries:
        return muted("no searches reported")
    return format_html(
        '<ol class="geo-search-queries">{}</ol>',
        format_html_join("", '<li value="{}">{}</li>', queries),
    )


def outcome_badge(status: Status) -> SafeString:
    return format_html(
        '<span class="geo-badge geo-{}">{}</span>',
        status.outcome.value,
        OUTCOME_LABELS[status.outcome],
    )


def status_context(status: Status) -> dict[str, Any]:
    """What templates/admin/sampling/_status.html needs, all derived from one Status."""
    planned = max(status.planned, 1)
    counts = {name: getattr(status, _SEGMENT_FIELDS.get(name, name)) for name in STATUS_SEGMENTS}
    return {
        "status": status,
        "outcome_label": OUTCOME_LABELS[status.outcome],
        "counts": counts,
        "segments": [
            {"name": name, "count": n, "width": f"{100 * n / planned:.2f}"}
            for name, n in counts.items()
            if n
        ],
        "percent_terminal": f"{100 * status.terminal / planned:.0f}",
    }


def layer_display(sample: Sample, layer: str) -> str:
    """A layer's state as a person should read it. A sample whose collection failed never
    reaches evidence or analysis: those layers are terminal for it (with the failure reason),
    never "pending"/"analysing" (the engine leaves them at their initial state)."""
    state = getattr(sample, f"{layer}_state")
    collection_failed = sample.collection_state == CollectionState.FAILED
    if layer in ("evidence", "analysis") and collection_failed and state == "pending":
        reason = sample.failure_reason or "collection failed"
        return f"not collected ({reason})"
    return str(state)


class CaptureDisplay:
    """Read-only fields of a capture page or inline: screenshot, escaped answer, downloads.

    `capture_fields` is the layout both the capture page and the sample page's inline show;
    `capture_readonly_fields` are the computed ones among them."""

    capture_fields = (
        ("revision", "attempt_no", "collection_state", "status_code"),
        ("upstream_id", "captured_at", "upstream_cost_text"),
        "warnings",
        "error",
        "screenshot",
        "answer",
        "stored_objects",
    )
    capture_readonly_fields = ("upstream_cost_text", "screenshot", "answer", "stored_objects")

    @admin.display(description="screenshot")
    def screenshot(self, capture: Capture) -> SafeString:
        return screenshot_html(capture)

    @admin.display(description="upstream cost")
    def upstream_cost_text(self, capture: Capture) -> str:
        return money(capture.upstream_cost, capture.upstream_cost_currency)

    @admin.display(description="answer text (escaped)")
    def answer(self, capture: Capture) -> SafeString:
        return answer_html(capture.answer_text)

    @admin.display(description="raw response, text, citations (download)")
    def stored_objects(self, capture: Capture) -> SafeString:
        return evidence_objects_html(capture)

    @admin.display(description="citations")
    def citation_list(self, capture: Capture) -> SafeString:
        return citations_html(capture)

    @admin.display(description="searches the engine ran")
    def search_query_list(self, capture: Capture) -> SafeString:
        return search_queries_html(capture)
