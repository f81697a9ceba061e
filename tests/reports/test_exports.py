"""Report formats and the `report` command."""

from __future__ import annotations

import csv
import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db.models import F

from analysis.report_exports import report_csv, report_html, report_xlsx
from analysis.reports import build_run_report
from sampling.models import Run
from simulator import SimulatorHandle
from tests.reports.conftest import collected_run

pytestmark = pytest.mark.django_db


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def test_json_command_prints_the_checked_report(simulator: SimulatorHandle) -> None:
    run = collected_run(questions=2, repeats=1)
    out = io.StringIO()
    call_command("report", str(run.pk), "--format", "json", stdout=out)
    data = json.loads(out.getvalue())
    assert data["run_id"] == str(run.pk)
    assert data["denominator"] == "planned samples"
    overall = data["overall"]
    assert overall["counts"]["planned"] == 4
    assert overall["mention_rate"]["n"] == 4
    assert set(overall["mention_rate"]) == {"successes", "n", "value", "low", "high", "confidence"}
    assert [p["key"] for p in data["by_platform"]] == ["openai", "perplexity"]
    assert len(data["by_question"]) == 2
    assert data["checks"][0]["name"] == "conservation"


def test_csv_has_every_rate_with_n_and_interval(simulator: SimulatorHandle) -> None:
    run = collected_run(questions=1, repeats=2)
    report = build_run_report(run_id=run.pk)
    rows = list(csv.DictReader(io.StringIO(report_csv(report).removeprefix("\ufeff"))))
    mention = [r for r in rows if r["metric"] == "mention_rate" and r["scope"] == "run"]
    assert {r["entity"] for r in mention} == {"Acme", "Globex", "Initech"}
    for r in mention:
        assert r["n"] == "4"
        assert 0.0 <= float(r["ci_low"]) <= float(r["ci_high"]) <= 1.0
    planned = [r for r in rows if r["metric"] == "samples_planned"]
    assert {(r["scope"], r["value"]) for r in planned} >= {("run", "4"), ("platform", "2")}
    assert any(r["scope"] == "check" and r["group"] == "conservation" for r in rows)


def test_xlsx_command_writes_a_workbook(simulator: SimulatorHandle, tmp_path: Path) -> None:
    from openpyxl import load_workbook

    run = collected_run(questions=1, repeats=1)
    target = tmp_path / "report.xlsx"
    call_command("report", str(run.pk), "--format", "xlsx", "--output", str(target))
    book = load_workbook(target)
    assert book.sheetnames == [
        "Summary",
        "Run",
        "Platforms",
        "Questions",
        "Sentiment",
        "Head-to-head",
        "Over time",
        "Evidence",
        "Top cited domains",
        "Citation sources",
        "Searches",
        "Source opportunities",
    ]
    platforms = list(book["Platforms"].iter_rows(values_only=True))
    assert platforms[0][:8] == ("group", "planned", "succeeded", "failed", "cancelled",
                                "invalid", "review", "pending")  # fmt: skip
    assert [row[0] for row in platforms[1:]] == ["openai", "perplexity"]
    assert report_xlsx(build_run_report(run_id=run.pk))[:2] == b"PK"


def test_html_report_is_self_contained(simulator: SimulatorHandle, tmp_path: Path) -> None:
    run = collected_run(questions=2, repeats=1)
    target = tmp_path / "report.html"
    call_command("report", str(run.pk), "--format", "html", "--output", str(target))
    html = target.read_text(encoding="utf-8")
    parser = _Tags()
    parser.feed(html)
    tags = [t for t, _ in parser.tags]
    assert tags.count("svg") >= 5  # status, mention, share of voice, citations, trend
    assert "script" not in tags and "iframe" not in tags and "img" not in tags
    assert not [t for t, a in parser.tags if t == "link"]  # no external stylesheet
    # Nothing is loaded from anywhere: no src attributes, no url(...) in styles.
    assert not [a for _, a in parser.tags if "src" in a]
    assert not re.search(r"url\(", html)
    assert "default-src 'none'" in html
    assert "planned samples" in html


def test_report_command_refuses_an_inconsistent_run(simulator: SimulatorHandle) -> None:
    run = collected_run(questions=1, repeats=1)
    Run.objects.filter(pk=run.pk).update(planned_samples=F("planned_samples") + 1)
    with pytest.raises(
        CommandError, match=r"refused: .*record scan: 2 sample records, planned = 3"
    ):
        call_command("report", str(run.pk), "--format", "csv", stdout=io.StringIO())


def test_report_command_errors(db: None) -> None:
    with pytest.raises(CommandError, match="not a run id"):
        call_command("report", "nope")
    with pytest.raises(CommandError, match="no run with id"):
        call_command("report", "00000000-0000-0000-0000-000000000000")
    with pytest.raises(CommandError, match="needs --output"):
        call_command("report", "00000000-0000-0000-0000-000000000000", "--format", "xlsx")


def test_html_report_renders_for_a_look(simulator: SimulatorHandle, tmp_path: Path) -> None:
    """Keeps the rendered file for a visual check when GEO_KEEP_REPORT is set."""
    import os

    simulator.script({"match": "number 1:", "fault": "auth_error", "platform": "perplexity",
                      "times": None})  # fmt: skip
    run = collected_run(questions=3, repeats=3)
    html = report_html(build_run_report(run_id=run.pk))
    keep = os.environ.get("GEO_KEEP_REPORT")
    if keep:
        Path(keep).write_text(html, encoding="utf-8")
    assert "Per question" in html
