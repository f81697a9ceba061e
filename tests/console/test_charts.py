"""console/charts.py: the dashboard's server-drawn SVG, parsed back as XML."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

from console.charts import (
    Bar,
    Part,
    Point,
    Series,
    Stack,
    bar_chart,
    segments_of,
    stacked_chart,
    time_chart,
)

SVG = "{http://www.w3.org/2000/svg}"
DAY0 = datetime(2026, 3, 1, tzinfo=UTC)


def _tree(markup: str) -> ET.Element:
    return ET.fromstring(str(markup))  # noqa: S314  (our own output)


def _all(root: ET.Element, tag: str) -> list[ET.Element]:
    return list(root.iter(f"{SVG}{tag}"))


def _day(i: int) -> datetime:
    return DAY0 + timedelta(days=i)


def _points(segments: list[int], value: float = 0.4) -> list[Point]:
    return [
        Point(_day(i), value, value - 0.1, value + 0.1, href=f"/s?run={i}", segment=seg)
        for i, seg in enumerate(segments)
    ]


def _chart(points: list[Point], **kwargs: object) -> ET.Element:
    return _tree(
        time_chart(
            [Series("chatgpt", points)],
            title="visibility",
            start=DAY0,
            end=_day(max(1, len(points) - 1)),
            **kwargs,  # type: ignore[arg-type]
        )
    )


def test_a_line_is_never_drawn_across_a_segment_break() -> None:
    root = _chart(_points([0, 0, 0, 1, 1]))
    lines = [g for g in _all(root, "polyline") if g.get("class") == "geo-line"]
    assert len(lines) == 2
    assert [len(line.get("points", "").split()) for line in lines] == [3, 2]
    bands = [g for g in _all(root, "polygon") if g.get("class") == "geo-band"]
    assert len(bands) == 2
    breaks = [g for g in _all(root, "g") if g.get("class") == "geo-break"]
    assert len(breaks) == 1
    assert breaks[0].find(f"{SVG}text") is not None


def test_the_break_sits_between_the_last_point_before_and_the_first_after() -> None:
    root = _chart(_points([0, 1]))
    (rule,) = (g.find(f"{SVG}line") for g in _all(root, "g") if g.get("class") == "geo-break")
    assert rule is not None
    dots = [float(c.get("cx", "")) for c in _all(root, "circle")]
    assert dots[0] < float(rule.get("x1", "")) < dots[1]


def test_a_point_without_a_value_cuts_the_line_and_draws_no_dot() -> None:
    points = _points([0, 0, 0, 0])
    points[2] = Point(_day(2), None)
    root = _chart(points)
    lines = [g for g in _all(root, "polyline") if g.get("class") == "geo-line"]
    assert len(lines) == 1  # [0, 1] joined; [3] alone has no line
    assert len(_all(root, "circle")) == 3
    assert not [g for g in _all(root, "g") if g.get("class") == "geo-break"]


def test_every_point_links_to_its_samples_with_its_figures_as_tooltip() -> None:
    points = [Point(DAY0, 0.5, 0.4, 0.6, href="/admin/s/?run=a&platform=x", label="50 % (5/10)")]
    root = _chart(points)
    (link,) = _all(root, "a")
    assert link.get("href") == "/admin/s/?run=a&platform=x"
    circle = link.find(f"{SVG}circle")
    assert circle is not None
    title = circle.find(f"{SVG}title")
    assert title is not None and title.text == "50 % (5/10)"


def test_values_are_placed_on_the_y_scale_and_inverted_on_request() -> None:
    top = _chart([Point(DAY0, 1.0, href="")])
    bottom = _chart([Point(DAY0, 0.0, href="")])
    y_top = float(_all(top, "circle")[0].get("cy", ""))
    y_bottom = float(_all(bottom, "circle")[0].get("cy", ""))
    assert y_top < y_bottom
    inverted = _chart([Point(DAY0, 1.0)], y_min=1.0, y_max=10.0, percent=False, invert=True)
    worst = _chart([Point(DAY0, 10.0)], y_min=1.0, y_max=10.0, percent=False, invert=True)
    assert float(_all(inverted, "circle")[0].get("cy", "")) < float(
        _all(worst, "circle")[0].get("cy", "")
    )


def test_names_and_labels_are_escaped() -> None:
    evil = '<script>alert("x")</script>'
    markup = str(
        time_chart(
            [Series(evil, [Point(DAY0, 0.5, label=evil, href='/x?a="b"')])],
            title=evil,
            start=DAY0,
            end=_day(1),
        )
    )
    assert "<script>" not in markup
    root = _tree(markup)
    assert root.tag == f"{SVG}svg"
    assert _all(root, "a")[0].get("href") == '/x?a="b"'


def test_the_chart_scales_to_its_container() -> None:
    root = _chart(_points([0, 0]), width=640, height=220)
    assert root.get("viewBox") == "0 0 640 220"
    assert root.get("width") == "100%"


def test_an_empty_range_says_so() -> None:
    markup = str(time_chart([Series("a", [])], title="t", start=DAY0, end=DAY0))
    assert "No data in this range." in markup
    _tree(markup)


def test_segments_of_splits_on_segment_and_missing_values() -> None:
    points = [*_points([0, 0, 1]), Point(_day(3), None, segment=1), *_points([1])]
    assert [len(run) for run in segments_of(points)] == [2, 1, 1]


def test_bars_carry_their_interval_text_and_link() -> None:
    root = _tree(
        bar_chart(
            [Bar("Acme", 0.4, 0.3, 0.5, text="40 % (40 of 100)", href="/s?run=1")],
            title="share of voice",
        )
    )
    (link,) = _all(root, "a")
    assert link.get("href") == "/s?run=1"
    (whisker,) = [line for line in _all(root, "line") if line.get("class") == "geo-whisker"]
    (rect,) = [r for r in _all(root, "rect") if r.get("class") == "geo-bar-rect"]
    assert float(whisker.get("x1", "")) < float(rect.get("x", "")) + float(rect.get("width", ""))
    assert "40 % (40 of 100)" in "".join(root.itertext())


def test_stacked_parts_take_their_share_of_the_row() -> None:
    root = _tree(
        stacked_chart(
            [
                Stack(
                    "Acme",
                    [
                        Part("positive", 3, "#0a0"),
                        Part("neutral", 1, "#999"),
                        Part("negative", 0, "#a00"),
                    ],
                )
            ],
            title="sentiment",
        )
    )
    parts = [r for r in _all(root, "rect") if r.get("class") == "geo-part"]
    assert len(parts) == 2  # a zero count draws nothing
    widths = [float(r.get("width", "")) for r in parts]
    assert abs(widths[0] - 3 * widths[1]) < 0.5


def test_a_row_without_mentions_says_so() -> None:
    markup = str(stacked_chart([Stack("Acme", [Part("positive", 0, "#0a0")])], title="s"))
    assert "no mentions" in markup
