"""A direct API that may or may not have run a request is parked, shown as uncertain, and
only a person's recorded decision moves it on: ask again, or keep a failed placeholder."""

from __future__ import annotations

from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from geo_collect.settings import platform_settings
from pipeline.invariants import check_all
from pipeline.review import NotResolvable, Resolution, resolve_uncertain
from sampling.models import Attempt, Run, Sample
from sampling.selectors import run_status
from simulator import SimulatorHandle
from tests.conftest import launch_funded, make_campaign_data
from tests.inprocess import drive_in_process
from tests.services import upstream_simulator

OPENAI = [{"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"}]


@pytest.fixture
def upstream(settings: Any) -> Iterator[SimulatorHandle]:
    with upstream_simulator(settings, seed=4) as handle:
        settings.GEO_PLATFORMS = platform_settings({"GEO_OPENAI_TIMEOUT": "0.5"})
        handle.script(
            {"match": "Hangs once", "fault": "hang", "times": 1, "params": {"hang_seconds": 2}}
        )
        yield handle


def _parked_run() -> tuple[Run, Sample]:
    data = make_campaign_data(questions=0, targets=OPENAI, repeats=1)
    data["questions"] = ["Hangs once: which CRM is best?"]
    data["screenshot_policy"] = "none"
    run = launch_funded(data)
    drive_in_process(run.pk)
    sample = Sample.objects.get(run=run)
    assert (sample.submission_state, sample.queue_state) == ("uncertain", "parked")
    status = run_status(run_id=run.pk)
    assert (status.uncertain, status.parked, status.finished) == (1, 1, False)
    return run, sample


@pytest.mark.django_db(transaction=True)
def test_not_executed_asks_again_with_the_decision_recorded(upstream: SimulatorHandle) -> None:
    run, sample = _parked_run()

    resolve_uncertain(sample_id=sample.pk, resolution=Resolution.NOT_EXECUTED, note="vendor log")
    drive_in_process(run.pk)

    sample.refresh_from_db()
    assert (sample.collection_state, sample.analysis_state) == ("completed", "accepted")
    first, second = Attempt.objects.filter(sample=sample).order_by("attempt_no")
    assert first.status == "failed" and "reviewed: not_executed (vendor log)" in first.error_message
    assert second.status == "accepted"
    assert run_status(run_id=run.pk).finished
    assert check_all(run_id=run.pk) == []


@pytest.mark.django_db(transaction=True)
def test_abandon_keeps_a_failed_placeholder_and_the_run_finishes(upstream: SimulatorHandle) -> None:
    run, sample = _parked_run()

    out = StringIO()
    call_command("resolve_uncertain", run=run.pk, resolution="abandon", stdout=out)

    sample.refresh_from_db()
    assert (sample.collection_state, sample.queue_state) == ("failed", "done")
    assert sample.failure_reason.startswith("reviewed: abandon")
    status = run_status(run_id=run.pk)
    assert (status.planned, status.failed, status.finished) == (1, 1, True)
    assert Attempt.objects.filter(sample=sample).count() == 1  # never sent again
    assert check_all(run_id=run.pk) == []


@pytest.mark.django_db
def test_only_a_parked_uncertain_sample_can_be_resolved() -> None:
    data = make_campaign_data(questions=1, targets=OPENAI, repeats=1)
    run = launch_funded(data)
    sample = Sample.objects.get(run=run)
    with pytest.raises(NotResolvable, match="is planned/ready, not parked as uncertain"):
        resolve_uncertain(sample_id=sample.pk, resolution=Resolution.ABANDON)
    with pytest.raises(CommandError, match="not parked as uncertain"):
        call_command("resolve_uncertain", sample.pk, resolution="abandon")
