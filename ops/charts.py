"""The operations page's charts: the last hours from the database, drawn as inline SVG (no
script, no external files, so nothing is fetched from a CDN and the page works offline).

Each series is bucketed by minute in the database and re-binned here into BUCKETS columns, so
a query returns at most minutes x platforms rows, however many samples there were.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from html import escape
from typing import Any

from django.db.models import Count, DateTimeField, Max, QuerySet
from django.db.models.functions import TruncMinute
from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe

from sampling.models import Attempt, EvidenceState, Sample

from .collectors import attention_counts

BUCKETS = 24
WIDTH, HEIGHT, PAD = 640, 180, 36
COLORS = (
    "#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed",
    "#0891b2", "#db2777", "#65a30d", "#475569", "#ea580c", "#0d9488",
)  # fmt: skip


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime

    @property
    def bucket(self) -> timedelta:
        return (self.end - self.start) / BUCKETS

    def index(self, at: datetime) -> int:
        return min(BUCKETS - 1, max(0, int((at - self.start) / self.bucket)))

    def labels(self) -> list[str]:
        return [(self.start + self.bucket * i).strftime("%H:%M") for i in range(BUCKETS)]


def _binned(rows: Iterable[tuple[str, datetime, float]], window: Window) -> dict[str, list[float]]:
    series: dict[str, list[float]] = defaultdict(lambda: [0.0] * BUCKETS)
    for name, minute, value in rows:
        series[name or "none"][window.index(minute)] += value
    return dict(sorted(series.items()))


def _per_minute(queryset: QuerySet[Any], *, at: str, by: str) -> list[tuple[str, Any, int]]:
    """(value of `by`, minute of `at`, rows) for the rows of `queryset`."""
    return list(
        queryset.annotate(minute=TruncMinute(at))
        .values_list(by, "minute")
        .annotate(n=Count("id"))
        .order_by()
    )


def throughput(window: Window) -> dict[str, list[float]]:
    """Samples whose answer was collected, per platform."""
    collected = Sample.objects.filter(completed_at__gte=window.start)
    return _binned(_per_minute(collected, at="completed_at", by="platform"), window)


def error_classes(window: Window) -> dict[str, list[float]]:
    """Attempts that ended in an error, per error class."""
    failed = Attempt.objects.filter(started_at__gte=window.start).exclude(error_class="")
    return _binned(_per_minute(failed, at="started_at", by="error_class"), window)


def queue_wait(window: Window) -> dict[str, list[float]]:
    """Launch -> first submit, the longest per bucket (seconds): how long new work waited."""
    rows = (
        Attempt.objects.filter(started_at__gte=window.start, attempt_no=1)
        .annotate(minute=TruncMinute("started_at"))
        .values("minute")
        .annotate(launched=Max("sample__run__created_at", output_field=DateTimeField()))
        .annotate(latest=Max("started_at"))
        .values_list("minute", "launched", "latest")
        .order_by()
    )
    longest = [0.0] * BUCKETS
    for minute, launched, latest in rows:
        i = window.index(minute)
        longest[i] = max(longest[i], (latest - launched).total_seconds())
    return {"launch → first submit (max)": longest}


def evidence_missing(window: Window) -> dict[str, list[float]]:
    """Share of collected answers whose evidence is partial or failed, per platform (%)."""
    rows = (
        Sample.objects.filter(completed_at__gte=window.start)
        .exclude(evidence_state=EvidenceState.PENDING)
        .annotate(minute=TruncMinute("completed_at"))
        .values_list("platform", "minute", "evidence_state")
        .annotate(n=Count("id"))
        .order_by()
    )
    total: dict[str, list[float]] = defaultdict(lambda: [0.0] * BUCKETS)
    missing: dict[str, list[float]] = defaultdict(lambda: [0.0] * BUCKETS)
    for platform, minute, state, n in rows:
        i = window.index(minute)
        total[platform][i] += n
        if state != EvidenceState.STORED:
            missing[platform][i] += n
    return {
        p: [100.0 * m / t if t else 0.0 for m, t in zip(missing[p], total[p], strict=True)]
        for p in sorted(total)
    }


def operations_context(*, hours: int) -> dict[str, Any]:
    end = timezone.now()
    window = Window(start=end - timedelta(hours=hours), end=end)
    labels = window.labels()
    attention = attention_counts()
    return {
        "charts": [
            ("Queue wait (seconds)", line_chart(queue_wait(window), labels)),
            ("Throughput: answers collected per platform", line_chart(throughput(window), labels)),
            ("Upstream errors by class", line_chart(error_classes(window), labels)),
            (
                "Evidence missing (% of collected answers)",
                line_chart(evidence_missing(window), labels),
            ),
        ],
        "attention": bar_chart(
            {
                "uncertain": {p: v["uncertain"] for p, v in attention.items()},
                "parked": {p: v["parked"] for p, v in attention.items()},
                "in flight": {p: v["leased"] for p, v in attention.items()},
            }
        ),
        "attention_rows": sorted(attention.items()),
    }


# --- drawing ------------------------------------------------------------------------------


def _legend(names: Iterable[str], top: float) -> tuple[str, int]:
    """Colour keys in rows that fit the width; returns the SVG and the number of rows."""
    parts, x, y = [], PAD, top
    for i, name in enumerate(names):
        width = 24 + 7 * len(name)
        if x + width > WIDTH and x > PAD:
            x, y = PAD, y + 16
        color = COLORS[i % len(COLORS)]
        parts.append(
            f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{color}"/>'
            f'<text x="{x + 14}" y="{y}" font-size="11">{escape(name)}</text>'
        )
        x += width
    return "".join(parts), int((y - top) / 16) + 1


def line_chart(series: dict[str, list[float]], labels: list[str]) -> SafeString:
    if not series:
        return mark_safe('<p class="help">Nothing in this window.</p>')
    top = max((max(v) for v in series.values()), default=0.0) or 1.0
    plot_w, plot_h = WIDTH - 2 * PAD, HEIGHT - 2 * PAD
    step = plot_w / max(1, len(labels) - 1)

    def point(i: int, value: float) -> str:
        return f"{PAD + i * step:.1f},{PAD + plot_h - value / top * plot_h:.1f}"

    lines = [
        f'<polyline fill="none" stroke="{COLORS[n % len(COLORS)]}" stroke-width="2" '
        f'points="{" ".join(point(i, v) for i, v in enumerate(values))}">'
        f"<title>{escape(name)}</title></polyline>"
        for n, (name, values) in enumerate(series.items())
    ]
    ticks = "".join(
        f'<text x="{PAD + i * step:.1f}" y="{HEIGHT - PAD + 14}" font-size="10" '
        f'text-anchor="middle">{label}</text>'
        for i, label in enumerate(labels)
        if i % 4 == 0
    )
    axes = (
        f'<line x1="{PAD}" y1="{PAD + plot_h}" x2="{WIDTH - PAD}" y2="{PAD + plot_h}" '
        f'stroke="#999"/><text x="4" y="{PAD}" font-size="10">{top:.4g}</text>'
        f'<text x="4" y="{PAD + plot_h}" font-size="10">0</text>'
    )
    legend, rows = _legend(series, HEIGHT + 10)
    height = HEIGHT + 16 * rows
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" viewBox="0 0 {WIDTH} {height}" '
        f'width="{WIDTH}" height="{height}">{axes}{"".join(lines)}{ticks}{legend}</svg>'
    )
    return mark_safe(svg)  # noqa: S308  (every text in it is escaped above)


def bar_chart(groups: dict[str, dict[str, int]]) -> SafeString:
    """Horizontal bars, one row per (platform, kind) with a value."""
    rows = [(f"{p} {kind}", v) for kind, values in groups.items() for p, v in values.items() if v]
    if not rows:
        return mark_safe('<p class="help">No uncertain, parked or in-flight samples.</p>')
    top = max(v for _, v in rows)
    height = 18 * len(rows) + 8
    bars = "".join(
        f'<text x="0" y="{18 * i + 14}" font-size="11">{escape(name)}</text>'
        f'<rect x="170" y="{18 * i + 4}" height="12" width="{max(1, 400 * v / top):.1f}" '
        f'fill="{COLORS[i % len(COLORS)]}"/>'
        f'<text x="{176 + 400 * v / top:.1f}" y="{18 * i + 14}" font-size="11">{v}</text>'
        for i, (name, v) in enumerate(rows)
    )
    svg = f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width="{WIDTH}" height="{height}">'
    return mark_safe(f"{svg}{bars}</svg>")  # noqa: S308
