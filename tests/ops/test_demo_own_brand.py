"""`manage.py demo --campaign FILE` with a brand the simulator has never seen: the answers are
about that campaign's entities, so its report says something (issue 29, finding 2)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tests.ops.test_demo_supervision import _embedded_env

pytestmark = pytest.mark.e2e

NEVER_SEEN = {
    "tenant": "lumenfold",
    "name": "a brand of its own",
    "brand": {"name": "Lumenfold", "aliases": ["流明"], "domains": ["lumenfold.io"]},
    "competitors": [
        {"name": "Quillstack", "aliases": [], "domains": ["quillstack.com"]},
        {"name": "Tallyborne", "aliases": [], "domains": ["tallyborne.com"]},
    ],
    "questions": [
        "Which invoicing tool is best for freelancers?",
        "Is Lumenfold better than Quillstack for a small agency?",
        "哪个开票软件最适合自由职业者？",
    ],
    "targets": [
        {"platform": platform, "device": "desktop", "region": region, "mode": "web_search"}
        for platform, region in (
            ("openai", "us"),
            ("anthropic", "us"),
            ("gemini", "global"),
            ("perplexity", "us"),
            ("kimi", "cn"),
        )
    ],
    "repeats": 3,
    "screenshot_policy": "none",
}
_JSON_REPORT = re.compile(r"The same as JSON: (\S+)")
_PROGRESS = re.compile(
    r"(\d+)/(\d+) done — succeeded (\d+), failed (\d+), invalid (\d+), review (\d+), "
    r"pending (\d+)"
)


def test_a_brand_the_simulator_never_saw_gets_a_report_that_says_something(
    tmp_path: Path,
) -> None:
    campaign = tmp_path / "campaign.json"
    campaign.write_text(json.dumps(NEVER_SEEN))
    done = subprocess.run(
        [sys.executable, "manage.py", "demo", "--campaign", str(campaign)],
        cwd=settings.BASE_DIR,
        env=_embedded_env(tmp_path / "var"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    _summary_adds_up(done.stdout)
    found = _JSON_REPORT.search(done.stdout)
    assert found, done.stdout
    report = json.loads(Path(found.group(1)).read_text(encoding="utf-8"))

    rates = {
        row["label"]: row["entity_mention_rates"]["Lumenfold"]["value"]
        for row in report["by_platform"]
    }
    between = [platform for platform, value in rates.items() if value not in (None, 0.0, 1.0)]
    assert len(between) >= 3, rates

    brand = next(s for s in report["sentiment"] if s["entity"] == "Lumenfold")
    assert brand["mentioned"] > 0
    shown = {name for name, share in brand["sentiment"].items() if share["successes"]}
    assert len(shown) >= 2, brand  # praise and criticism both occur, not one flat verdict
    assert any(row["both"] > 0 for row in report["head_to_head"]), report["head_to_head"]
    assert "Head-to-head of Lumenfold" in done.stdout


def _summary_adds_up(stdout: str) -> None:
    """Issue 29, finding 11: every progress line names each bucket and they add up; money is
    in major units with its currency."""
    lines = _PROGRESS.findall(stdout)
    assert lines, stdout
    for terminal, planned, succeeded, failed, invalid, review, pending in lines:
        done = int(succeeded) + int(failed) + int(invalid) + int(review)
        assert (done, done + int(pending)) == (int(terminal), int(planned)), stdout
    assert re.search(r"held at launch \d+\.\d\d USD = charged \d+\.\d\d USD", stdout), stdout
    assert "minor units" not in stdout
