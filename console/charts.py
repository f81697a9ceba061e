"""Charts drawn on the server as inline SVG (the monitoring dashboard, docs/decisions.md
"The dashboard's charts are server-drawn SVG").

Three shapes, each a pure function of its data returning escaped markup:

* `time_chart`: rates (or any value) over time, one line per series with its interval as a
  band. A series is cut into its segments (a change of what is measured, the comparability
  key): a line and a band never cross from one segment to the next, and each break is drawn
  as a dashed vertical rule labelled "break". A point with no value (n = 0) cuts the line too.
  Every point is a link (`href`) with its figures as a tooltip (`title`).
* `bar_chart`: horizontal bars with optional interval whiskers (share of voice, citation
  rates, top cited domains), each bar a link when it has one.
* `stacked_chart`: horizontal bars of parts (the sentiment mix), each part with its count.

The SVG scales to its container (`viewBox`, width 100%), so a laptop screen never scrolls
sideways; text is escaped (entity names and domains come from customers and upstreams). The
CSP (console/csp.py) allows inline SVG: it runs no script.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache
from html import escape as _esc
from itertools import pairwise

from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

__all__ = [
    "PALETTE",
    "Bar",
    "Part",
    "Point",
    "Series",
    "Stack",
    "bar_chart",
    "segments_of",
    "stacked_chart",
    "time_chart",
]

# Colour-blind-safe (Okabe-Ito), in the order series get them.
PALETTE = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000")
FONT = 'font-family="system-ui, sans-serif" font-size="11"'


@dataclass(frozen=True)
class Point:
    at: datetime
    value: float | None  # None: nothing measured (n = 0): the line is cut here
    low: float | None = None  # the interval drawn as a band; None: no band at this point
    high: float | None = None
    href: str = ""  # the samples behind the point
    label: str = ""  # its tooltip, e.g. "2026-03-01 · 41.0 % (82 of 200), 95 % CI 34-48 %"
    segment: int = 0  # points of different segments are never joined


@dataclass(frozen=True)
class Series:
    name: str
    points: Sequence[Point]
    colour: str = ""  # "" : from PALETTE by position


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    low: float | None = None
    high: float | None = None
    text: str = ""  # shown at the bar's end, e.g. "41 % (82 of 200)"
    href: str = ""


@dataclass(frozen=True)
class Part:
    name: str
    count: int
    colour: str


@dataclass(frozen=True)
class Stack:
    label: str
    parts: Sequence[Part] = field(default_factory=tuple)
    href: str = ""


def segments_of(points: Sequence[Point]) -> list[list[Point]]:
    """Consecutive runs of points that may be joined by a line: same segment, with a value."""
    runs: list[list[Point]] = []
    current: list[Point] = []
    previous: Point | None = None
    for point in points:
        if point.value is None or (previous is not None and point.segment != previous.segment):
            if current:
                runs.append(current)
            current = []
        if point.value is not None:
            current.append(point)
        previous = point
    if current:
        runs.append(current)
    return runs


def _breaks(points: Sequence[Point]) -> list[tuple[datetime, datetime]]:
    """(last point of a segment, first point of the next) for each change of segment."""
    return [
        (before.at, after.at)
        for before, after in pairwise(points)
        if before.segment != after.segment
    ]


def _percent(value: float) -> str:
    return f"{value * 100:.0f} %"


def _number(value: float) -> str:
    return f"{value:.1f}"


def _svg(width: int, height: int, title: str, body: Sequence[str]) -> SafeString:
    head = format_html(
        '<svg class="geo-chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {} {}" '
        'width="100%" role="img" aria-label="{}" ' + FONT + "><title>{}</title>",
        width,
        height,
        title,
        title,
    )
    return mark_safe(head + "".join(body) + "</svg>")  # noqa: S308  (parts escaped below)


def _f(value: float) -> str:
    return f"{value:.1f}"


def time_chart(
    series: Sequence[Series],
    *,
    title: str,
    start: datetime,
    end: datetime,
    width: int = 640,
    height: int = 220,
    y_min: float = 0.0,
    y_max: float = 1.0,
    percent: bool = True,
    invert: bool = False,
) -> SafeString:
    """Values over [start, end]: one line and band per series, cut at segment breaks.

    `percent`: values are shares (0..1) shown as percentages; else numbers. `invert` puts
    `y_min` at the top (average position: 1 is best)."""
    left, right, top, bottom = 44, 12, 22, 24
    plot_w, plot_h = width - left - right, height - top - bottom
    if end <= start:
        start, end = start - timedelta(hours=12), start + timedelta(hours=12)
    span = (end - start).total_seconds()
    if y_max <= y_min:
        y_max = y_min + 1.0

    @cache  # the same moments recur in every series of a chart
    def x(at: datetime) -> float:
        return left + plot_w * (at - start).total_seconds() / span

    def y(value: float) -> float:
        share = (min(max(value, y_min), y_max) - y_min) / (y_max - y_min)
        return top + plot_h * (share if invert else 1.0 - share)

    show: Callable[[float], str] = _percent if percent else _number
    body = [_legend(series, left)]
    body += _y_axis(left, width - right, y, y_min, y_max, show)
    body += _x_axis(start, end, x, top + plot_h)
    for index, one in enumerate(series):
        colour = one.colour or PALETTE[index % len(PALETTE)]
        body += _bands_and_lines(one, colour, x, y)
        for before, after in _breaks(one.points):
            body.append(_break_rule(x(before) + (x(after) - x(before)) / 2, top, top + plot_h))
        fill = _esc(colour)
        body += [_dot(point, fill, x, y) for point in one.points if point.value is not None]
    if not any(point.value is not None for one in series for point in one.points):
        body.append(
            format_html(
                '<text x="{}" y="{}" text-anchor="middle" fill="#6b7280">{}</text>',
                _f(left + plot_w / 2),
                _f(top + plot_h / 2),
                "No data in this range.",
            )
        )
    return _svg(width, height, title, body)


def _legend(series: Sequence[Series], left: int) -> str:
    parts: list[str] = []
    offset = float(left)
    for index, one in enumerate(series):
        colour = one.colour or PALETTE[index % len(PALETTE)]
        parts.append(
            format_html(
                '<rect x="{}" y="6" width="10" height="10" fill="{}"/>'
                '<text x="{}" y="15">{}</text>',
                _f(offset),
                colour,
                _f(offset + 14),
                one.name,
            )
        )
        offset += 24 + 6.5 * len(one.name)
    return "".join(parts)


def _y_axis(
    left: int,
    right: int,
    y: Callable[[float], float],
    y_min: float,
    y_max: float,
    show: Callable[[float], str],
) -> list[str]:
    out: list[str] = []
    for step in range(5):
        value = y_min + (y_max - y_min) * step / 4
        at = y(value)
        out.append(
            format_html(
                '<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#e5e7eb"/>'
                '<text x="{}" y="{}" text-anchor="end" fill="#4b5563">{}</text>',
                left,
                right,
                _f(at),
                _f(at),
                left - 4,
                _f(at + 4),
                show(value),
            )
        )
    return out


def _x_axis(
    start: datetime, end: datetime, x: Callable[[datetime], float], baseline: float
) -> list[str]:
    out: list[str] = []
    ticks = 5
    for step in range(ticks):
        at = start + (end - start) * step / (ticks - 1)
        anchor = "start" if step == 0 else "end" if step == ticks - 1 else "middle"
        out.append(
            format_html(
                '<text x="{}" y="{}" text-anchor="{}" fill="#4b5563">{}</text>',
                _f(x(at)),
                _f(baseline + 16),
                anchor,
                at.strftime("%Y-%m-%d"),
            )
        )
    return out


def _bands_and_lines(
    one: Series, colour: str, x: Callable[[datetime], float], y: Callable[[float], float]
) -> list[str]:
    out: list[str] = []
    for run in segments_of(one.points):
        banded = [p for p in run if p.low is not None and p.high is not None]
        if len(banded) == len(run):
            upper = [f"{_f(x(p.at))},{_f(y(p.high or 0.0))}" for p in run]
            lower = [f"{_f(x(p.at))},{_f(y(p.low or 0.0))}" for p in reversed(run)]
            out.append(
                format_html(
                    '<polygon class="geo-band" points="{}" fill="{}" fill-opacity="0.15" '
                    'stroke="none"/>',
                    " ".join(upper + lower),
                    colour,
                )
            )
        if len(run) > 1:
            out.append(
                format_html(
                    '<polyline class="geo-line" points="{}" fill="none" stroke="{}" '
                    'stroke-width="1.6"/>',
                    " ".join(f"{_f(x(p.at))},{_f(y(p.value or 0.0))}" for p in run),
                    colour,
                )
            )
    return out


def _break_rule(at: float, top: float, bottom: float) -> str:
    return format_html(
        '<g class="geo-break"><line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#6b7280" '
        'stroke-dasharray="3 3"/><text x="{}" y="{}" text-anchor="middle" fill="#374151">'
        "break</text></g>",
        _f(at),
        _f(at),
        _f(top),
        _f(bottom),
        _f(at),
        _f(top - 2),
    )


def _dot(
    point: Point, fill: str, x: Callable[[datetime], float], y: Callable[[float], float]
) -> str:
    # The hot path (a year of daily runs: thousands of points): f-strings over escaped text
    # rather than format_html, same escaping (quotes included, for the attributes); `fill`
    # is the series' colour, escaped once by the caller.
    circle = (
        f'<circle class="geo-point" cx="{x(point.at):.1f}" cy="{y(point.value or 0.0):.1f}" '
        f'r="2.6" fill="{fill}"><title>{_esc(point.label)}</title></circle>'
    )
    return f'<a href="{_esc(point.href)}">{circle}</a>' if point.href else circle


def bar_chart(
    bars: Sequence[Bar],
    *,
    title: str,
    width: int = 640,
    row_height: int = 22,
    label_width: int = 170,
    x_max: float = 1.0,
    colour: str = PALETTE[0],
) -> SafeString:
    """One horizontal bar per row over [0, x_max], its interval as a whisker."""
    text_width = 200
    plot_w = width - label_width - text_width - 8
    height = max(1, len(bars)) * row_height + 8
    scale = plot_w / x_max if x_max > 0 else 0.0
    body: list[str] = []
    for index, bar in enumerate(bars):
        top = 4 + index * row_height
        middle = top + row_height / 2
        length = max(0.0, min(bar.value, x_max)) * scale
        row = [
            format_html(
                '<text x="{}" y="{}" text-anchor="end">{}</text>',
                label_width - 6,
                _f(middle + 4),
                _clip(bar.label, 26),
            ),
            format_html(
                '<rect class="geo-bar-rect" x="{}" y="{}" width="{}" height="{}" fill="{}">'
                "<title>{}</title></rect>",
                label_width,
                _f(top + 4),
                _f(length),
                row_height - 8,
                colour,
                f"{bar.label}: {bar.text}" if bar.text else bar.label,
            ),
        ]
        if bar.low is not None and bar.high is not None:
            row.append(
                format_html(
                    '<line class="geo-whisker" x1="{}" x2="{}" y1="{}" y2="{}" stroke="#111827"/>',
                    _f(label_width + bar.low * scale),
                    _f(label_width + min(bar.high, x_max) * scale),
                    _f(middle),
                    _f(middle),
                )
            )
        row.append(
            format_html(
                '<text x="{}" y="{}" fill="#374151">{}</text>',
                _f(label_width + plot_w + 6),
                _f(middle + 4),
                bar.text,
            )
        )
        joined = mark_safe("".join(row))  # noqa: S308  (each part escaped)
        body.append(format_html('<a href="{}">{}</a>', bar.href, joined) if bar.href else joined)
    if not bars:
        body.append(format_html('<text x="{}" y="16" fill="#6b7280">{}</text>', 4, "No data."))
        height = 24
    return _svg(width, height, title, body)


def stacked_chart(
    stacks: Sequence[Stack],
    *,
    title: str,
    width: int = 640,
    row_height: int = 22,
    label_width: int = 170,
) -> SafeString:
    """One bar per row split into its parts by share of the row's total; a legend on top."""
    legend_height = 20
    plot_w = width - label_width - 8
    height = legend_height + max(1, len(stacks)) * row_height + 8
    body: list[str] = []
    names: dict[str, str] = {}
    for stack in stacks:
        for part in stack.parts:
            names.setdefault(part.name, part.colour)
    offset = float(label_width)
    for name, colour in names.items():
        body.append(
            format_html(
                '<rect x="{}" y="4" width="10" height="10" fill="{}"/><text x="{}" y="13">{}'
                "</text>",
                _f(offset),
                colour,
                _f(offset + 14),
                name,
            )
        )
        offset += 24 + 6.5 * len(name)
    for index, stack in enumerate(stacks):
        top = legend_height + 4 + index * row_height
        total = sum(part.count for part in stack.parts)
        row = [
            format_html(
                '<text x="{}" y="{}" text-anchor="end">{}</text>',
                label_width - 6,
                _f(top + row_height / 2 + 4),
                _clip(stack.label, 26),
            )
        ]
        left = float(label_width)
        for part in stack.parts:
            if not total or not part.count:
                continue
            share = part.count / total
            row.append(
                format_html(
                    '<rect class="geo-part" x="{}" y="{}" width="{}" height="{}" fill="{}">'
                    "<title>{}</title></rect>",
                    _f(left),
                    _f(top + 4),
                    _f(plot_w * share),
                    row_height - 8,
                    part.colour,
                    f"{stack.label} · {part.name}: {part.count} ({share * 100:.0f} %)",
                )
            )
            left += plot_w * share
        if not total:
            row.append(
                format_html(
                    '<text x="{}" y="{}" fill="#6b7280">{}</text>',
                    label_width,
                    _f(top + row_height / 2 + 4),
                    "no mentions",
                )
            )
        joined = mark_safe("".join(row))  # noqa: S308  (each part escaped)
        body.append(
            format_html('<a href="{}">{}</a>', stack.href, joined) if stack.href else joined
        )
    return _svg(width, height, title, body)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
