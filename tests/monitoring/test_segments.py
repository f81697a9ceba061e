"""Comparability: a run whose targets (or questions) differ starts a new segment, and no
series, baseline or detection mixes segments."""

from __future__ import annotations

from typing import Any

import pytest

from analysis.changes import detect
from monitoring import selectors
from sampling.models import Campaign, Run
from simulator import SimulatorHandle
from tests.monitoring.conftest import series_run
from tests.reports.conftest import TARGETS

pytestmark = pytest.mark.django_db

GB = {"platform": "openai", "device": "desktop", "region": "gb", "mode": "web_search"}


def _run(targets: list[dict[str, str]], **options: Any) -> Run:
    return series_run(questions=2, repeats=2, targets=targets, name="segments", **options)


def test_a_run_whose_targets_differ_starts_a_new_segment(simulator: SimulatorHandle) -> None:
    first, second = _run(TARGETS), _run(TARGETS)
    third = _run([*TARGETS, GB])  # openai is now asked in two regions
    campaign = Campaign.objects.get(pk=third.campaign_id)

    pooled = selectors.series(campaign=campaign, metric="visibility")
    assert [p.run_id for p in pooled.points] == [str(first.pk), str(second.pk), str(third.pk)]
    assert [p.segment for p in pooled.points] == [0, 0, 1]
    assert [s.runs for s in pooled.segments] == [2, 1]
    assert pooled.segments[1].changes == ("target added: openai/gb/desktop/web_search",)
    assert pooled.segments[1].start == third.finished_at

    # The same target measured the same way stays one segment; the platform pooled over its
    # regions does not.
    us = selectors.series(campaign=campaign, metric="visibility", platform="openai", region="us")
    assert [p.segment for p in us.points] == [0, 0, 0] and len(us.segments) == 1
    openai = selectors.series(campaign=campaign, metric="visibility", platform="openai")
    assert [p.segment for p in openai.points] == [0, 0, 1]
    perplexity = selectors.series(campaign=campaign, metric="visibility", platform="perplexity")
    assert [p.segment for p in perplexity.points] == [0, 0, 0]

    # No baseline reaches across the break: the third run has no comparable predecessor
    # overall or on openai, and its perplexity baseline is the second run alone.
    assert selectors.comparable_runs(campaign=campaign, run=third) == []
    assert selectors.comparable_runs(campaign=campaign, run=second) == [str(first.pk)]
    assert selectors.comparable_runs(campaign=campaign, run=third, platform="perplexity") == [
        str(second.pk),
        str(first.pk),
    ]
    overall = selectors.cells(campaign=campaign, run=third, per=(), baseline=7)
    assert overall and all(c.cell.before_n == 0 and c.before_runs == () for c in overall)
    by_platform = selectors.cells(campaign=campaign, run=third, baseline=7)
    assert {c.group["platform"] for c in by_platform} == {"openai", "perplexity"}
    for cell in by_platform:
        if cell.group["platform"] == "openai":
            assert cell.cell.before_n == 0 and cell.before_runs == ()
        else:
            assert cell.before_runs == (str(second.pk), str(first.pk))
            assert cell.cell.before_n > 0
    # detection skips the cells with no comparable before window: whatever openai did, it
    # is never reported as a change
    detected = {d.key for d in detect([c.cell for c in by_platform], min_effect=0.0, fdr=1.0)}
    assert not any(key.split("|")[2] == "openai" for key in detected)


def test_an_edited_question_breaks_the_series_of_all_questions_only(
    simulator: SimulatorHandle,
) -> None:
    _run(TARGETS)
    renamed = _run(TARGETS, edit={1: "Question number 1: which vendor is cheapest?"})
    campaign = Campaign.objects.get(pk=renamed.campaign_id)
    everything = selectors.series(campaign=campaign, metric="visibility")
    assert [p.segment for p in everything.points] == [0, 1]
    assert any("1 question(s) edited" in c for c in everything.segments[1].changes)
    kept = selectors.series(campaign=campaign, metric="visibility", question=_question(renamed, 0))
    assert [p.segment for p in kept.points] == [0, 0]
    edited = selectors.series(
        campaign=campaign, metric="visibility", question=_question(renamed, 1)
    )
    assert [p.segment for p in edited.points] == [0, 1]


def _question(run: Run, position: int) -> int:
    return int(run.campaign.questions.get(position=position).pk)
