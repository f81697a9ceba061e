"""Reports people open elsewhere (issue 29, finding 9): a rectangular CSV with a section
column, question text and a byte-order mark; a workbook with every section of the HTML report,
percentages and real dates, frozen headers and widths; breakdowns by target, region, device
and mode when a run has more than one; a cancelled run says so and its cancelled samples are
their own bucket."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime

import pytest
from openpyxl import load_workbook

from analysis.report_exports import (
    CSV_COLUMNS,
    report_csv,
    report_html,
    report_json,
    report_xlsx,
)
from analysis.reports import build_run_report
from pipeline.runs import cancel_run
from tests.conftest import launch_funded, make_campaign_data
from tests.inprocess import drive_in_process
from tests.reports.conftest import collected_run
from tests.services import SimulatorHandle

pytestmark = pytest.mark.django_db

TWO_COLLECTOR_TARGETS = [
    {"platform": "collector", "device": "desktop", "region": "cn", "mode": "web_search"},
    {"platform": "collector", "device": "mobile", "region": "us", "mode": "web_search"},
]
CHINESE = "哪个CRM最适合小团队？Acme 还是 Globex？"


def _chinese_run() -> str:
    data = make_campaign_data(questions=1, targets=TWO_COLLECTOR_TARGETS, repeats=2, name="cn")
    data["questions"] = [CHINESE, "Which CRM is best for a small team: Acme or Globex?"]
    data["screenshot_policy"] = "none"
    run = launch_funded(data)
    drive_in_process(run.pk)
    return str(run.pk)


def test_the_csv_is_one_rectangle_with_a_bom_and_question_text(
    simulator: SimulatorHandle,
) -> None:
    report = build_run_report(run_id=_chinese_run())

    text = report_csv(report)

    assert text.startswith("\ufeffsection,")
    rows = list(csv.reader(io.StringIO(text.removeprefix("\ufeff"))))
    assert rows[0] == list(CSV_COLUMNS)
    assert {len(row) for row in rows} == {len(CSV_COLUMNS)}
    assert [row for row in rows if row[0] == "section"] == [rows[0]]  # one header
    records = list(csv.DictReader(io.StringIO(text.removeprefix("\ufeff"))))
    h2h = [r for r in records if r["section"] == "head_to_head"]
    assert h2h and {r["question"] for r in h2h} >= {CHINESE}
    assert all(not r["group"].isdigit() for r in h2h)  # no internal ids
    sections = {r["section"] for r in records}
    assert sections >= {"summary", "sentiment", "head_to_head", "metrics", "breakdown", "check"}


def test_the_workbook_has_every_section_with_percentages_dates_and_frozen_headers(
    simulator: SimulatorHandle, tmp_path: object
) -> None:
    report = build_run_report(run_id=_chinese_run())

    book = load_workbook(io.BytesIO(report_xlsx(report)))

    assert book.sheetnames == [
        "Summary", "Run", "Platforms", "Questions", "By target", "By device", "By region",
        "Sentiment", "Head-to-head", "Over time", "Evidence", "Top cited domains",
        "Citation sources", "Searches", "Source opportunities",
    ]  # fmt: skip
    for sheet in book.worksheets:
        assert sheet.freeze_panes == "A2", sheet.title
        assert sheet["A1"].font.bold, sheet.title
        assert sheet.column_dimensions["A"].width >= 8, sheet.title
    platforms = book["Platforms"]
    header = [c.value for c in platforms[1]]
    rate = platforms.cell(row=2, column=header.index("mention rate") + 1)
    assert isinstance(rate.value, float) and rate.number_format == "0.0%"
    created = book["Over time"].cell(row=2, column=2)
    assert isinstance(created.value, datetime) and created.number_format == "yyyy-mm-dd hh:mm"
    h2h = [row for row in book["Head-to-head"].iter_rows(min_row=2, values_only=True)]
    assert CHINESE in {row[0] for row in h2h}


def test_two_targets_of_one_platform_are_broken_down_by_target_region_and_device(
    simulator: SimulatorHandle,
) -> None:
    report = build_run_report(run_id=_chinese_run())

    by = {b.dimension: b for b in report.breakdowns}
    assert list(by) == ["target", "device", "region"]  # one mode: no mode breakdown
    assert [m.label for m in by["region"].groups] == ["cn", "us"]
    assert [m.label for m in by["target"].groups] == [
        "collector / desktop / cn / web_search",
        "collector / mobile / us / web_search",
    ]
    for breakdown in by.values():
        assert sum(m.counts.planned for m in breakdown.groups) == report.overall.counts.planned
        mentioned = sum(m.mention_rate.successes for m in breakdown.groups)
        assert mentioned == report.overall.mention_rate.successes
    assert [m.counts.planned for m in by["region"].groups] == [4, 4]
    data = json.loads(report_json(report))
    assert [b["dimension"] for b in data["breakdowns"]] == ["target", "device", "region"]
    assert "by_platform" in data and data["by_platform"][0]["key"] == "collector"
    html = report_html(report)
    assert 'id="by-region"' in html and 'id="by-device"' in html


def test_a_run_with_one_target_per_platform_has_no_breakdowns(simulator: SimulatorHandle) -> None:
    run = collected_run(questions=1, repeats=1)

    assert build_run_report(run_id=run.pk).breakdowns == []


def test_a_cancelled_run_says_so_and_counts_its_cancelled_samples_apart(
    simulator: SimulatorHandle,
) -> None:
    run = collected_run(questions=2, repeats=1, drive=False)
    cancelled = cancel_run(run_id=run.pk)
    assert cancelled == run.planned_samples

    report = build_run_report(run_id=run.pk)

    assert report.cancelled and report.cancelled_at is not None
    counts = report.overall.counts
    assert (counts.cancelled, counts.failed) == (cancelled, 0)
    assert report.outcome == "cancelled"
    # Never asked, so no evidence about the brand: out of the mention rates' denominator.
    assert report.overall.mention_rate.n == 0
    data = json.loads(report_json(report))
    assert data["cancelled"] is True
    assert data["overall"]["counts"]["cancelled"] == cancelled
    assert data["overall"]["counts"]["failed"] == 0
    html = report_html(report)
    assert "This run was cancelled" in html
    assert f'<b id="cancelled-count">{cancelled}</b>' in html
    records = list(csv.DictReader(io.StringIO(report_csv(report).removeprefix("\ufeff"))))
    summary = {r["metric"]: r["value"] for r in records if r["section"] == "summary"}
    assert summary["cancelled"] == "yes"
