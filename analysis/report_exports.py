"""Report formats: JSON, CSV (long format), XLSX (openpyxl) and self-contained HTML with
inline SVG charts (no JavaScript, no external resources; every label escaped)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

from django.template.loader import render_to_string
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from openpyxl import Workbook
from openpyxl.styles import Font

from sampling.spreadsheets import InertCsvWriter, write_only_row

from .reports import BUCKETS, Metrics, RunReport
from .stats import Rate

__all__ = [
    "FORMATS",
    "render_report",
    "report_csv",
    "report_csv_chunks",
    "report_html",
    "report_json",
    "report_xlsx",
    "stream_report",
]

FORMATS = ("json", "csv", "xlsx", "html")
CSV_COLUMNS = ("scope", "group", "metric", "entity", "value", "successes", "n", "ci_low", "ci_high")
COLOURS = {
    "succeeded": "#16a34a",
    "review": "#f59e0b",
    "invalid": "#9ca3af",
    "failed": "#dc2626",
    "pending": "#93c5fd",
}
ENTITY_COLOURS = ("#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#65a30d")


def report_json(report: RunReport) -> str:
    return json.dumps(report.as_dict(), ensure_ascii=False, indent=2)


# --- CSV --------------------------------------------------------------------------------


def _rate_row(scope: str, group: str, metric: str, entity: str, r: Rate) -> list[Any]:
    return [scope, group, metric, entity, r.value, r.successes, r.n, r.low, r.high]


def _metric_rows(scope: str, m: Metrics, brand: str) -> Iterator[list[Any]]:
    group = m.label if scope != "run" else m.key
    for name, value in m.counts.as_dict().items():
        yield [scope, group, f"samples_{name}", "", value, "", "", "", ""]
    for entity, r in m.entity_mention_rates.items():
        yield _rate_row(scope, group, "mention_rate", entity, r)
    for entity, r in m.share_of_voice.items():
        yield _rate_row(scope, group, "share_of_voice", entity, r)
    yield [scope, group, "avg_first_mention_rank", brand, m.first_rank.mean, "", m.first_rank.n]
    yield _rate_row(scope, group, "brand_citation_share", brand, m.citation_share)
    for domain, n in m.top_domains:
        yield [scope, group, "top_cited_domain", domain, n, "", "", "", ""]


def _analysis_rows(report: RunReport) -> Iterator[list[Any]]:
    """Sentiment per entity and head-to-head per question, from the report's revision."""
    for stat in report.sentiment:
        for sentiment, r in stat.shares.items():
            yield _rate_row("sentiment", "all", f"sentiment_{sentiment}", stat.entity, r)
        yield _rate_row("sentiment", "all", "recommended", stat.entity, stat.recommended)
    for h in report.head_to_head:
        group = str(h.question_revision_id)
        yield _rate_row("head_to_head", group, "brand_ranked_first", h.competitor, h.brand_ahead)
        for name in ("answers", "both", "brand_only", "competitor_only"):
            yield ["head_to_head", group, name, h.competitor, getattr(h, name), "", "", "", ""]


def _csv_rows(report: RunReport) -> Iterator[list[Any]]:
    yield list(CSV_COLUMNS)
    yield from _analysis_rows(report)
    yield from _metric_rows("run", report.overall, report.brand)
    for m in report.by_platform:
        yield from _metric_rows("platform", m, report.brand)
    for m in report.by_question:
        yield from _metric_rows("question", m, report.brand)
    for p in report.over_time:
        for name, value in p.counts.as_dict().items():
            yield ["over_time", p.run_id, f"samples_{name}", "", value]
        yield _rate_row("over_time", p.run_id, "mention_rate", report.brand, p.mention_rate)
        yield _rate_row("over_time", p.run_id, "share_of_voice", report.brand, p.share_of_voice)
        yield _rate_row(
            "over_time", p.run_id, "brand_citation_share", report.brand, p.citation_share
        )
    for e in report.evidence:
        yield _rate_row("evidence", e.platform, "evidence_missing_rate", "", e.missing_rate)
        for reason, n in e.reasons.items():
            yield ["evidence", e.platform, "evidence_missing_reason", reason, n]
    for check in report.checks:
        yield ["check", check.name, "passed", "", check.detail]


def report_csv_chunks(report: RunReport, rows_per_chunk: int = 500) -> Iterator[str]:
    """The CSV in chunks of rows, for a streaming response (no whole file in memory)."""
    out = io.StringIO()
    writer = InertCsvWriter(out, lineterminator="\n")
    for index, row in enumerate(_csv_rows(report), start=1):
        writer.writerow(row)
        if index % rows_per_chunk == 0:
            yield out.getvalue()
            out.seek(0)
            out.truncate()
    yield out.getvalue()


def report_csv(report: RunReport) -> str:
    return "".join(report_csv_chunks(report))


# --- XLSX -------------------------------------------------------------------------------


def _table_header(report: RunReport) -> list[str]:
    header = ["group", "planned", *BUCKETS]
    header += ["brand mentioned", "mention rate", "95% CI low", "95% CI high"]
    header += [f"SoV {e}" for e in report.entities]
    header += ["SoV n", "avg first rank", "rank n", "citation share", "cit. n", "CI low", "CI high"]
    return header


def _table_row(m: Metrics, report: RunReport) -> list[Any]:
    c = m.counts
    sov_n = next(iter(m.share_of_voice.values())).n if m.share_of_voice else 0
    return [
        m.label,
        c.planned,
        *(getattr(c, b) for b in BUCKETS),
        m.mention_rate.successes,
        m.mention_rate.value,
        m.mention_rate.low,
        m.mention_rate.high,
        *(m.share_of_voice[e].value for e in report.entities),
        sov_n,
        m.first_rank.mean,
        m.first_rank.n,
        m.citation_share.value,
        m.citation_share.n,
        m.citation_share.low,
        m.citation_share.high,
    ]


def report_xlsx(report: RunReport) -> bytes:
    """Write-only workbook: rows stream to a temporary file as they are appended."""
    book = Workbook(write_only=True)
    summary = book.create_sheet("Summary")
    for row in (
        ("run", report.run_id),
        ("tenant", report.tenant),
        ("campaign", report.campaign),
        ("brand", report.brand),
        ("competitors", ", ".join(report.competitors)),
        ("outcome", report.outcome),
        ("created", report.created_at.isoformat()),
        ("generated", report.generated_at.isoformat()),
        ("denominator", "planned samples"),
        *((f"check: {c.name}", c.detail) for c in report.checks),
    ):
        write_only_row(summary, list(row))
    header = _table_header(report)
    bold = Font(bold=True)
    for title, rows in (
        ("Run", [report.overall]),
        ("Platforms", report.by_platform),
        ("Questions", report.by_question),
    ):
        sheet = book.create_sheet(title)
        write_only_row(sheet, header, font=bold)
        for m in rows:
            write_only_row(sheet, _table_row(m, report))
    trend = book.create_sheet("Over time")
    write_only_row(
        trend, ["run", "created", "planned", *BUCKETS, "mention rate", "CI low", "CI high", "n"]
    )
    for p in report.over_time:
        c = p.counts
        write_only_row(
            trend,
            [
                p.run_id,
                p.created_at.isoformat(),
                c.planned,
                *(getattr(c, b) for b in BUCKETS),
                p.mention_rate.value,
                p.mention_rate.low,
                p.mention_rate.high,
                p.mention_rate.n,
            ],
        )
    domains = book.create_sheet("Top cited domains")
    write_only_row(domains, ["domain", "citations"])
    for domain, n in report.overall.top_domains:
        write_only_row(domains, [domain, n])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


# --- HTML and charts --------------------------------------------------------------------


def pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.1f}%"


def rate_text(r: Rate) -> str:
    if r.value is None:
        return f"— (n={r.n})"
    return (
        f"{pct(r.value)} ({r.successes}/{r.n}; 95% CI {pct(r.low)}–{pct(r.high)}; "
        f"{r.confidence} confidence)"
    )


def _svg(width: int, height: int, body: SafeString, label: str) -> SafeString:
    return format_html(
        '<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}" '
        'role="img" aria-label="{}" class="chart">{}</svg>',
        width,
        height,
        width,
        height,
        label,
        body,
    )


def _join(parts: list[SafeString]) -> SafeString:
    return mark_safe("".join(parts))  # noqa: S308  # every part built by format_html


def status_chart(groups: list[Metrics]) -> SafeString:
    """One stacked bar per group: succeeded / review / invalid / failed / pending."""
    left, bar_w, row_h = 190, 460, 26
    height = 30 + row_h * len(groups)
    parts: list[SafeString] = []
    for i, m in enumerate(groups):
        y = 8 + i * row_h
        parts.append(
            format_html(
                '<text x="{}" y="{}" text-anchor="end" class="lbl">{}</text>',
                left - 8,
                y + 14,
                _short(m.label, 24),
            )
        )
        x = float(left)
        planned = max(m.counts.planned, 1)
        for bucket in BUCKETS:
            n = getattr(m.counts, bucket)
            if not n:
                continue
            w = bar_w * n / planned
            parts.append(
                format_html(
                    '<rect x="{}" y="{}" width="{}" height="18" fill="{}">'
                    "<title>{}: {}</title></rect>",
                    f"{x:.1f}",
                    y,
                    f"{w:.1f}",
                    COLOURS[bucket],
                    bucket,
                    n,
                )
            )
            x += w
        parts.append(
            format_html(
                '<text x="{}" y="{}" class="num">{}/{} succeeded</text>',
                left + bar_w + 8,
                y + 14,
                m.counts.succeeded,
                m.counts.planned,
            )
        )
    legend_y = height - 6
    for j, bucket in enumerate(BUCKETS):
        parts.append(
            format_html(
                '<rect x="{}" y="{}" width="10" height="10" fill="{}"/>'
                '<text x="{}" y="{}" class="lbl">{}</text>',
                left + j * 92,
                legend_y - 9,
                COLOURS[bucket],
                left + j * 92 + 14,
                legend_y,
                bucket,
            )
        )
    return _svg(left + bar_w + 130, height + 6, _join(parts), "sample status per group")


def rate_chart(rows: list[tuple[str, Rate]], *, label: str, colour: str = "#2563eb") -> SafeString:
    """Horizontal bars (0-100%) with Wilson 95% interval whiskers."""
    left, bar_w, row_h = 190, 420, 26
    height = 28 + row_h * len(rows)
    parts: list[SafeString] = []
    for tick in (0, 25, 50, 75, 100):
        x = left + bar_w * tick / 100
        parts.append(
            format_html(
                '<line x1="{}" y1="4" x2="{}" y2="{}" class="grid"/>'
                '<text x="{}" y="{}" text-anchor="middle" class="tick">{}%</text>',
                x,
                x,
                height - 18,
                x,
                height - 4,
                tick,
            )
        )
    for i, (name, r) in enumerate(rows):
        y = 6 + i * row_h
        parts.append(
            format_html(
                '<text x="{}" y="{}" text-anchor="end" class="lbl">{}</text>',
                left - 8,
                y + 14,
                _short(name, 24),
            )
        )
        if r.value is not None:
            parts.append(
                format_html(
                    '<rect x="{}" y="{}" width="{}" height="16" fill="{}" opacity="0.85">'
                    "<title>{}</title></rect>",
                    left,
                    y + 2,
                    f"{bar_w * r.value:.1f}",
                    colour,
                    rate_text(r),
                )
            )
        lo, hi = left + bar_w * r.low, left + bar_w * r.high
        parts.append(
            format_html(
                '<line x1="{}" y1="{}" x2="{}" y2="{}" class="ci"/>'
                '<line x1="{}" y1="{}" x2="{}" y2="{}" class="ci"/>'
                '<line x1="{}" y1="{}" x2="{}" y2="{}" class="ci"/>',
                f"{lo:.1f}",
                y + 10,
                f"{hi:.1f}",
                y + 10,
                f"{lo:.1f}",
                y + 5,
                f"{lo:.1f}",
                y + 15,
                f"{hi:.1f}",
                y + 5,
                f"{hi:.1f}",
                y + 15,
            )
        )
        parts.append(
            format_html(
                '<text x="{}" y="{}" class="num">{} n={}</text>',
                left + bar_w + 8,
                y + 14,
                pct(r.value),
                r.n,
            )
        )
    return _svg(left + bar_w + 110, height, _join(parts), label)


def trend_chart(report: RunReport) -> SafeString:
    """Brand mention rate per run over time, with its interval as a band of whiskers."""
    points = report.over_time
    if not points:
        return SafeString("")
    left, top, w, h = 50, 10, 560, 180
    step = w / max(len(points) - 1, 1)
    parts: list[SafeString] = []
    for tick in (0, 25, 50, 75, 100):
        y = top + h - h * tick / 100
        parts.append(
            format_html(
                '<line x1="{}" y1="{}" x2="{}" y2="{}" class="grid"/>'
                '<text x="{}" y="{}" text-anchor="end" class="tick">{}%</text>',
                left,
                y,
                left + w,
                y,
                left - 6,
                y + 4,
                tick,
            )
        )
    coords = []
    for i, p in enumerate(points):
        x = left + (step * i if len(points) > 1 else w / 2)
        r = p.mention_rate
        parts.append(
            format_html(
                '<line x1="{}" y1="{}" x2="{}" y2="{}" class="ci"/>',
                f"{x:.1f}",
                f"{top + h - h * r.low:.1f}",
                f"{x:.1f}",
                f"{top + h - h * r.high:.1f}",
            )
        )
        if r.value is not None:
            y = top + h - h * r.value
            coords.append(f"{x:.1f},{y:.1f}")
            parts.append(
                format_html(
                    '<circle cx="{}" cy="{}" r="4" fill="#2563eb"><title>{} {}</title></circle>',
                    f"{x:.1f}",
                    f"{y:.1f}",
                    p.created_at.strftime("%Y-%m-%d %H:%M"),
                    rate_text(r),
                )
            )
        parts.append(
            format_html(
                '<text x="{}" y="{}" text-anchor="middle" class="tick">{}</text>',
                f"{x:.1f}",
                top + h + 16,
                p.created_at.strftime("%m-%d %H:%M"),
            )
        )
    if len(coords) > 1:
        parts.insert(
            0,
            format_html(
                '<polyline points="{}" fill="none" stroke="#2563eb" stroke-width="2"/>',
                " ".join(coords),
            ),
        )
    return _svg(left + w + 30, top + h + 28, _join(parts), "brand mention rate over time")


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def report_html(report: RunReport) -> str:
    entity_colours = {
        e: ENTITY_COLOURS[i % len(ENTITY_COLOURS)] for i, e in enumerate(report.entities)
    }
    groups = [*report.by_platform]
    labels = {int(m.key): m.label for m in report.by_question if m.key.isdigit()}
    return render_to_string(
        "reports/run_report.html",
        {
            "report": report,
            "buckets": BUCKETS,
            "overall": report.overall,
            "status_svg": status_chart([report.overall, *groups, *report.by_question]),
            "mention_svg": rate_chart(
                [(m.label, m.mention_rate) for m in [report.overall, *groups]],
                label="brand mention rate per platform",
            ),
            "question_svg": rate_chart(
                [(m.label, m.mention_rate) for m in report.by_question],
                label="brand mention rate per question",
            ),
            "sov_svg": rate_chart(
                [(e, report.overall.share_of_voice[e]) for e in report.entities],
                label="share of voice",
                colour="#db2777",
            ),
            "citation_svg": rate_chart(
                [(m.label, m.citation_share) for m in [report.overall, *groups]],
                label="citation share of the brand's domains",
                colour="#059669",
            ),
            "trend_svg": trend_chart(report),
            "entity_colours": entity_colours,
            "rows": [_html_row(m, report) for m in [report.overall, *groups]],
            "question_rows": [_html_row(m, report) for m in report.by_question],
            "sentiment_rows": [
                {
                    "entity": s.entity,
                    "n": s.mentioned,
                    "shares": [rate_text(r) for r in s.shares.values()],
                    "recommended": rate_text(s.recommended),
                }
                for s in report.sentiment
            ],
            "h2h_rows": [
                {
                    "h": h,
                    "label": labels.get(h.question_revision_id, str(h.question_revision_id)),
                    "ahead": rate_text(h.brand_ahead),
                }
                for h in report.head_to_head
            ],
        },
    )


def _html_row(m: Metrics, report: RunReport) -> dict[str, Any]:
    return {
        "m": m,
        "mention": rate_text(m.mention_rate),
        "sov": rate_text(m.share_of_voice[report.brand]),
        "rank": "—" if m.first_rank.mean is None else f"{m.first_rank.mean:.2f}",
        "citation": rate_text(m.citation_share),
        "domains": ", ".join(f"{d} ({n})" for d, n in m.top_domains[:5]),
    }


def stream_report(report: RunReport, fmt: str) -> Iterator[bytes]:
    """The rendered report in chunks: CSV row by row (for a StreamingHttpResponse), the other
    formats in one piece."""
    if fmt == "csv":
        return (chunk.encode() for chunk in report_csv_chunks(report))
    return iter([render_report(report, fmt)])


def render_report(report: RunReport, fmt: str) -> bytes:
    if fmt == "json":
        return report_json(report).encode()
    if fmt == "csv":
        return report_csv(report).encode()
    if fmt == "xlsx":
        return report_xlsx(report)
    if fmt == "html":
        return report_html(report).encode()
    raise ValueError(f"unknown report format {escape(fmt)!r}; choose one of {', '.join(FORMATS)}")
