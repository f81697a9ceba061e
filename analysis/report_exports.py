"""Report formats: JSON, CSV (long format), XLSX (openpyxl) and self-contained HTML with
inline SVG charts (no JavaScript, no external resources; every label escaped)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from django.template.loader import render_to_string
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe
from openpyxl import Workbook
from openpyxl.cell import WriteOnlyCell
from openpyxl.styles import Font
from openpyxl.utils import get_column_letter

from sampling.spreadsheets import InertCsvWriter

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
COLOURS = {
    "succeeded": "#16a34a",
    "cancelled": "#6b7280",
    "review": "#f59e0b",
    "invalid": "#9ca3af",
    "failed": "#dc2626",
    "pending": "#93c5fd",
}
ENTITY_COLOURS = ("#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#65a30d")


def report_json(report: RunReport) -> str:
    return json.dumps(report.as_dict(), ensure_ascii=False, indent=2)


# --- CSV --------------------------------------------------------------------------------
# One rectangle: every row has every column (empty where a metric has none), the first column
# names the report's section, questions are named by their text. A UTF-8 byte-order mark
# first, so a spreadsheet opened by double-click reads Chinese text as such.

CSV_COLUMNS = (
    "section",
    "scope",
    "group",
    "question",
    "metric",
    "entity",
    "value",
    "successes",
    "n",
    "ci_low",
    "ci_high",
)
BOM = "\ufeff"


def _row(section: str, scope: str, group: str, metric: str, **values: Any) -> list[Any]:
    cells = {"section": section, "scope": scope, "group": group, "metric": metric, **values}
    return ["" if cells.get(c) is None else cells.get(c, "") for c in CSV_COLUMNS]


def _rate_row(
    section: str, scope: str, group: str, metric: str, entity: str, r: Rate, question: str = ""
) -> list[Any]:
    return _row(
        section,
        scope,
        group,
        metric,
        question=question,
        entity=entity,
        value=r.value,
        successes=r.successes,
        n=r.n,
        ci_low=r.low,
        ci_high=r.high,
    )


def _question_text(label: str) -> str:
    """A question revision's label is "rN: text"; the text alone."""
    head, sep, text = label.partition(": ")
    return text if sep and head.startswith("r") and head[1:].isdigit() else label


def _metric_rows(section: str, scope: str, m: Metrics, brand: str) -> Iterator[list[Any]]:
    group = m.label if scope != "run" else m.key
    question = _question_text(m.label) if scope == "question" else ""

    def row(metric: str, **values: Any) -> list[Any]:
        return _row(section, scope, group, metric, question=question, **values)

    for name, value in m.counts.as_dict().items():
        yield row(f"samples_{name}", value=value)
    for entity, r in m.entity_mention_rates.items():
        yield _rate_row(section, scope, group, "mention_rate", entity, r, question)
    for entity, r in m.share_of_voice.items():
        yield _rate_row(section, scope, group, "share_of_voice", entity, r, question)
    yield row("avg_first_mention_rank", entity=brand, value=m.first_rank.mean, n=m.first_rank.n)
    yield _rate_row(
        section, scope, group, "brand_citation_share", brand, m.citation_share, question
    )
    for domain, n in m.top_domains:
        yield row("top_cited_domain", entity=domain, value=n)
    yield row("found_not_cited", value=m.found_not_cited)
    for category, r in m.category_share.items():
        yield _rate_row(section, scope, group, "citation_share_category", category, r, question)
    for entity, r in m.entity_citation_share.items():
        yield _rate_row(section, scope, group, "citation_share_entity", entity, r, question)


def _source_rows(report: RunReport) -> Iterator[list[Any]]:
    """What the engines searched (per question and platform) and the source opportunities."""
    for s in report.searches:
        yield _row(
            "searches", "question", s.platform, "search_query", question=_question_text(s.question),
            entity=s.query, value=s.n,
        )  # fmt: skip
    for o in report.opportunities:
        yield _row("source_opportunity", "run", o.category, "competitor_answers", entity=o.domain,
                   value=o.n, n=o.n)  # fmt: skip


def _question_labels(report: RunReport) -> dict[int, str]:
    return {int(m.key): m.label for m in report.by_question if m.key.isdigit()}


def _analysis_rows(report: RunReport) -> Iterator[list[Any]]:
    """Sentiment per entity and head-to-head per question, from the report's revision."""
    for stat in report.sentiment:
        for sentiment, r in stat.shares.items():
            yield _rate_row("sentiment", "all", "all", f"sentiment_{sentiment}", stat.entity, r)
        yield _rate_row("sentiment", "all", "all", "recommended", stat.entity, stat.recommended)
    labels = _question_labels(report)
    for h in report.head_to_head:
        label = labels.get(h.question_revision_id, f"revision {h.question_revision_id}")
        text = _question_text(label)
        yield _rate_row(
            "head_to_head", "question", label, "brand_ranked_first", h.competitor, h.brand_ahead,
            text,
        )  # fmt: skip
        for name in ("answers", "both", "brand_only", "competitor_only"):
            yield _row(
                "head_to_head", "question", label, name, question=text, entity=h.competitor,
                value=getattr(h, name),
            )  # fmt: skip


def _summary_rows(report: RunReport) -> Iterator[list[Any]]:
    for name, value in _summary(report):
        yield _row("summary", "run", report.run_id, name, value=value)


def _csv_rows(report: RunReport) -> Iterator[list[Any]]:
    yield list(CSV_COLUMNS)
    yield from _summary_rows(report)
    yield from _analysis_rows(report)
    yield from _source_rows(report)
    yield from _metric_rows("metrics", "run", report.overall, report.brand)
    for m in report.by_platform:
        yield from _metric_rows("metrics", "platform", m, report.brand)
    for m in report.by_question:
        yield from _metric_rows("metrics", "question", m, report.brand)
    for b in report.breakdowns:
        for m in b.groups:
            yield from _metric_rows("breakdown", b.dimension, m, report.brand)
    brand = report.brand
    for p in report.over_time:
        for name, value in p.counts.as_dict().items():
            yield _row("over_time", "run", p.run_id, f"samples_{name}", value=value)
        yield _rate_row("over_time", "run", p.run_id, "mention_rate", brand, p.mention_rate)
        yield _rate_row("over_time", "run", p.run_id, "share_of_voice", brand, p.share_of_voice)
        yield _rate_row(
            "over_time", "run", p.run_id, "brand_citation_share", brand, p.citation_share
        )
    for e in report.evidence:
        yield _rate_row(
            "evidence", "platform", e.platform, "evidence_missing_rate", "", e.missing_rate
        )
        for reason, n in e.reasons.items():
            yield _row(
                "evidence", "platform", e.platform, "evidence_missing_reason", entity=reason,
                value=n,
            )  # fmt: skip
    for check in report.checks:
        yield _row("check", "check", check.name, "passed", value=check.detail)


def _summary(report: RunReport) -> list[tuple[str, Any]]:
    """What the report is about, for the CSV's summary rows and the workbook's first sheet."""
    return [
        ("run", report.run_id),
        ("tenant", report.tenant),
        ("campaign", report.campaign),
        ("brand", report.brand),
        ("competitors", ", ".join(report.competitors)),
        ("outcome", report.outcome),
        ("cancelled", "yes" if report.cancelled else "no"),
        ("cancelled_at", report.cancelled_at),
        ("created", report.created_at),
        ("finished", report.finished_at),
        ("generated", report.generated_at),
        ("denominator", "planned samples"),
        ("domain_classification_version", report.classification_version),
    ]


def report_csv_chunks(report: RunReport, rows_per_chunk: int = 500) -> Iterator[str]:
    """The CSV in chunks of rows, for a streaming response (no whole file in memory)."""
    out = io.StringIO()
    out.write(BOM)
    writer = InertCsvWriter(out, lineterminator="\n")
    for index, row in enumerate(_csv_rows(report), start=1):
        writer.writerow([v.isoformat() if isinstance(v, datetime) else v for v in row])
        if index % rows_per_chunk == 0:
            yield out.getvalue()
            out.seek(0)
            out.truncate()
    yield out.getvalue()


def report_csv(report: RunReport) -> str:
    return "".join(report_csv_chunks(report))


# --- XLSX -------------------------------------------------------------------------------
# Every section of the HTML report, one sheet each: rates as numbers formatted as
# percentages, dates as dates (UTC), the header row frozen and bold, columns wide enough.

PERCENT = "0.0%"
DATE = "yyyy-mm-dd hh:mm"


class _Pct(float):
    """A share in [0, 1], written with the percent format."""


def _pct(value: float | None) -> _Pct | None:
    return None if value is None else _Pct(value)


def _cell(sheet: Any, value: Any, *, bold: bool = False) -> WriteOnlyCell:
    if isinstance(value, datetime):  # Excel has no time zones: UTC, named in the header
        value = value.astimezone(UTC).replace(tzinfo=None)
    cell = WriteOnlyCell(sheet, value="" if value is None else value)
    if isinstance(value, str):
        cell.data_type = "s"  # text stays text, never a formula
    elif isinstance(value, _Pct):
        cell.value = float(value)
        cell.number_format = PERCENT
    elif isinstance(value, datetime):
        cell.number_format = DATE
    if bold:
        cell.font = Font(bold=True)
    return cell


def _sheet(book: Workbook, title: str, header: list[str], rows: Iterable[list[Any]]) -> None:
    """A sheet with a frozen, bold header row and columns sized to the header and content."""
    sheet = book.create_sheet(title)
    sheet.freeze_panes = "A2"
    rows = list(rows)
    for index, name in enumerate(header):
        longest = max([len(name), *(len(_shown(row[index])) for row in rows if index < len(row))])
        sheet.column_dimensions[get_column_letter(index + 1)].width = min(max(longest, 8) + 2, 60)
    sheet.append([_cell(sheet, name, bold=True) for name in header])
    for row in rows:
        sheet.append([_cell(sheet, value) for value in row])


def _shown(value: Any) -> str:
    if isinstance(value, _Pct):
        return "100.0%"
    if isinstance(value, datetime):
        return "2026-01-01 00:00"
    return "" if value is None else str(value)


def _table_header(report: RunReport, first: str = "group") -> list[str]:
    header = [first, "planned", *BUCKETS]
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
        _pct(m.mention_rate.value),
        _pct(m.mention_rate.low),
        _pct(m.mention_rate.high),
        *(_pct(m.share_of_voice[e].value) for e in report.entities),
        sov_n,
        m.first_rank.mean,
        m.first_rank.n,
        _pct(m.citation_share.value),
        m.citation_share.n,
        _pct(m.citation_share.low),
        _pct(m.citation_share.high),
    ]


def _rate_cells(r: Rate) -> list[Any]:
    return [_pct(r.value), r.successes, r.n, _pct(r.low), _pct(r.high)]


RATE_HEADER = ["rate", "successes", "n", "95% CI low", "95% CI high"]


def report_xlsx(report: RunReport) -> bytes:
    """Write-only workbook: rows stream to a temporary file as they are appended."""
    book = Workbook(write_only=True)
    summary = [[name.replace("_", " ") + (" (UTC)" if isinstance(v, datetime) else ""), v]
               for name, v in _summary(report)]  # fmt: skip
    summary += [[f"check: {c.name}", c.detail] for c in report.checks]
    _sheet(book, "Summary", ["item", "value"], summary)
    tables = [("Run", [report.overall]), ("Platforms", report.by_platform)]
    tables += [("Questions", report.by_question)]
    for title, groups in tables:
        _sheet(book, title, _table_header(report), (_table_row(m, report) for m in groups))
    for b in report.breakdowns:
        rows = (_table_row(m, report) for m in b.groups)
        _sheet(book, f"By {b.dimension}", _table_header(report, b.dimension), rows)
    sentiment = [
        [s.entity, s.mentioned, *(_pct(r.value) for r in s.shares.values()),
         *_rate_cells(s.recommended)]
        for s in report.sentiment
    ]  # fmt: skip
    shares = list(report.sentiment[0].shares) if report.sentiment else []
    _sheet(
        book,
        "Sentiment",
        ["entity", "mentioned", *shares, *(f"recommended {h}" for h in RATE_HEADER)],
        sentiment,
    )
    labels = _question_labels(report)
    _sheet(
        book,
        "Head-to-head",
        ["question", "competitor", "answers", "both named", "brand only", "competitor only",
         *(f"brand first: {h}" for h in RATE_HEADER)],
        (
            [_question_text(labels.get(h.question_revision_id, str(h.question_revision_id))),
             h.competitor, h.answers, h.both, h.brand_only, h.competitor_only,
             *_rate_cells(h.brand_ahead)]
            for h in report.head_to_head
        ),
    )  # fmt: skip
    _sheet(
        book,
        "Over time",
        ["run", "created (UTC)", "planned", *BUCKETS, "mention rate", "CI low", "CI high", "n"],
        (
            [p.run_id, p.created_at, p.counts.planned, *(getattr(p.counts, b) for b in BUCKETS),
             _pct(p.mention_rate.value), _pct(p.mention_rate.low), _pct(p.mention_rate.high),
             p.mention_rate.n]
            for p in report.over_time
        ),
    )  # fmt: skip
    _sheet(
        book,
        "Evidence",
        ["platform", *(f"missing {h}" for h in RATE_HEADER), "reasons"],
        (
            [e.platform, *_rate_cells(e.missing_rate),
             ", ".join(f"{k} ({n})" for k, n in e.reasons.items())]
            for e in report.evidence
        ),
    )  # fmt: skip
    _sheet(
        book,
        "Top cited domains",
        ["domain", "citations"],
        [list(d) for d in report.overall.top_domains],
    )
    overall = report.overall
    _sheet(
        book,
        "Citation sources",
        ["kind", "category or entity", *RATE_HEADER],
        [
            *(["category", c, *_rate_cells(r)] for c, r in overall.category_share.items()),
            *(["entity", e, *_rate_cells(r)] for e, r in overall.entity_citation_share.items()),
            ["found, not cited", "", None, overall.found_not_cited, None, None, None],
        ],
    )
    _sheet(
        book,
        "Searches",
        ["question", "platform", "query", "answers"],
        ([_question_text(s.question), s.platform, s.query, s.n] for s in report.searches),
    )
    _sheet(
        book,
        "Source opportunities",
        ["domain", "category", "competitor answers citing it (n)"],
        ([o.domain, o.category, o.n] for o in report.opportunities),
    )
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
    labels = _question_labels(report)
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
            "breakdown_tables": [
                {"dimension": b.dimension, "rows": [_html_row(m, report) for m in b.groups]}
                for b in report.breakdowns
            ],
            "sentiment_rows": [
                {
                    "entity": s.entity,
                    "n": s.mentioned,
                    "shares": [rate_text(r) for r in s.shares.values()],
                    "recommended": rate_text(s.recommended),
                }
                for s in report.sentiment
            ],
            "category_rows": [
                {"name": c, "share": rate_text(r)} for c, r in report.overall.category_share.items()
            ],
            "entity_citation_rows": [
                {"name": e, "share": rate_text(r)}
                for e, r in report.overall.entity_citation_share.items()
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
