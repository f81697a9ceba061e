"""The metrics series after a run through a real Celery worker: the run's end is followed by
the series' outbox row, relayed and written by the worker, and the rows agree with the
report (the `series` invariant)."""

from __future__ import annotations

from typing import Any

import pytest

from analysis.reports import build_run_report
from monitoring.checks import check_series
from monitoring.models import SeriesRow
from monitoring.selectors import series
from sampling.models import OutboxMessage
from tests.conftest import launch_funded, make_campaign_data
from tests.dispatching import tick_until
from tests.durability.conftest import assert_invariants
from tests.e2e.conftest import drive_until_settled

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TARGETS = [
    {"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"},
    {"platform": "perplexity", "device": "desktop", "region": "us", "mode": "web_search"},
]


def test_a_finished_run_gets_its_series_from_a_worker(simulator: Any, celery_worker: Any) -> None:
    data = make_campaign_data(questions=2, targets=TARGETS, repeats=2, name="series e2e")
    data["screenshot_policy"] = "none"
    data["topics"] = {data["questions"][0]: ["pricing"]}
    run = launch_funded(data)
    celery_worker()
    drive_until_settled(run.pk)

    def written() -> bool:
        return OutboxMessage.objects.filter(
            dedupe_key=f"series:{run.pk}:end:0", completed_at__isnull=False
        ).exists()

    tick_until(written)
    report = build_run_report(run_id=run.pk, with_trend=False)
    (point,) = series(campaign=run.campaign, metric="mention_rate").points
    assert (point.hits, point.n) == (
        report.overall.mention_rate.successes,
        report.overall.counts.planned,
    )
    assert SeriesRow.objects.filter(run=run, topic="pricing").exists()
    assert check_series(run.pk) == []
    assert_invariants(run)
