"""The sample counters (sampling/counters.py) follow every write path through the database
triggers, and a counter that differs from a scan of the samples is refused by check_invariants
and by the auditable report, naming the counter and the difference."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from analysis.reports import ReportIntegrityError, build_run_report
from pipeline.invariants import check_all
from pipeline.launch import launch_run
from sampling import counters
from sampling.models import Run, Sample
from sampling.selectors import platform_statuses, run_status
from sampling.services import save_campaign
from simulator import SimulatorHandle
from tests.conftest import fund_tenant, make_campaign_data, spec_with_tenant
from tests.inprocess import drive_in_process

from .conftest import COLLECTOR, OPENAI

pytestmark = pytest.mark.django_db


def _launch(questions: int = 3) -> Run:
    data = make_campaign_data(
        questions=questions, targets=[COLLECTOR, OPENAI], repeats=1, tenant="acme", name="plan"
    )
    data["screenshot_policy"] = "none"
    campaign = save_campaign(spec=spec_with_tenant(data))
    fund_tenant(campaign.tenant)
    return launch_run(campaign=campaign)


@pytest.fixture
def run(simulator: SimulatorHandle, django_capture_on_commit_callbacks: Any) -> Run:
    simulator.script(
        {"match": "Question number 2", "fault": "auth_error", "times": None, "platform": "openai"}
    )
    run = _launch()
    with django_capture_on_commit_callbacks(execute=True):
        drive_in_process(run.pk)
    run.refresh_from_db()
    assert run.finished_at is not None
    return run


def _scanned(run: Run) -> dict[str, int]:
    samples = Sample.objects.filter(run=run)
    return {
        "planned": samples.count(),
        "succeeded": samples.filter(
            collection_state="completed", analysis_state="accepted", validity="valid"
        ).count(),
        "failed": samples.filter(collection_state="failed", queue_state="done").count(),
        "parked": samples.filter(queue_state="parked").count(),
    }


def test_counters_follow_the_pipeline_and_equal_a_scan(run: Run) -> None:
    status = run_status(run_id=run.pk)
    scanned = _scanned(run)
    assert (status.planned, status.succeeded, status.failed, status.parked) == (
        scanned["planned"],
        scanned["succeeded"],
        scanned["failed"],
        scanned["parked"],
    )
    assert status.failed == 1 and status.finished
    assert counters.drift(run_id=run.pk) == []
    assert counters.drift() == []
    by_platform = platform_statuses(run_id=run.pk)
    assert sorted(by_platform) == ["collector", "openai"]
    assert sum(s.planned for s in by_platform.values()) == run.planned_samples
    assert status.layers["collection"] == {"completed": 5, "failed": 1}


def test_counters_follow_bulk_updates_and_deletes(simulator: SimulatorHandle) -> None:
    run = _launch()
    assert run_status(run_id=run.pk).layers["submission"] == {"planned": 6}
    Sample.objects.filter(run=run, platform="openai").update(queue_state="parked")
    assert run_status(run_id=run.pk).parked == 3
    Sample.objects.filter(run=run, platform="openai").delete()
    assert sorted(platform_statuses(run_id=run.pk)) == ["collector"]
    assert counters.drift(run_id=run.pk) == []


def test_open_samples_are_counted_as_a_scan_counts_them(simulator: SimulatorHandle) -> None:
    run = _launch()
    open_by_scan = Sample.objects.filter(run=run).exclude(queue_state="done")
    assert counters.open_samples(run_id=run.pk) == open_by_scan.count() == 6

    Sample.objects.filter(run=run, platform="openai").update(queue_state="done")
    first = Sample.objects.filter(run=run, platform="collector").order_by("pk").first()
    Sample.objects.filter(pk=getattr(first, "pk", None)).update(queue_state="parked")
    assert counters.open_samples(run_id=run.pk) == open_by_scan.count() == 3

    Sample.objects.filter(run=run).update(queue_state="done")
    assert counters.open_samples(run_id=run.pk) == open_by_scan.count() == 0


def test_a_corrupted_counter_is_refused_by_the_invariants_and_the_report(run: Run) -> None:
    succeeded = run_status(run_id=run.pk).succeeded
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {counters.TABLE} SET succeeded = succeeded + 1 "
            "WHERE id = (SELECT MIN(id) FROM sampling_samplecount WHERE run_id = %s "
            "AND platform = 'collector')",
            [run.pk],
        )
    expected = (
        f"run {run.pk} platform collector: counter sampling_samplecount.succeeded = "
        f"{_scanned_platform(run, 'collector') + 1}, scan of the samples = "
        f"{_scanned_platform(run, 'collector')} (difference +1)"
    )
    violations = [v for v in check_all(run.pk) if v.invariant == "counters"]
    assert [v.message for v in violations] == [expected]
    assert run_status(run_id=run.pk).succeeded == succeeded + 1
    with pytest.raises(ReportIntegrityError) as refused:
        build_run_report(run_id=run.pk, with_trend=False)
    assert expected in refused.value.differences


def _scanned_platform(run: Run, platform: str) -> int:
    return Sample.objects.filter(
        run=run,
        platform=platform,
        collection_state="completed",
        analysis_state="accepted",
        validity="valid",
    ).count()
