"""A collection vendor's accepted submit, then the worker dies before recording it: the task is
found again by its tag (DataForSEO has no idempotency key; posting again would be a second,
charged task), never posted twice, and what the vendor charged for it is booked once."""

from __future__ import annotations

from typing import Any

from billing.models import PendingAttemptCost
from billing.reconciliation import reconcile
from sampling.models import Attempt, Run, Sample
from simulator import SimulatorHandle

from .conftest import (
    IN_PROCESSES,
    Procs,
    assert_invariants,
    drive,
    launch,
    outcomes,
    run_finished,
    wait_killed,
)

pytestmark = IN_PROCESSES

AI_MODE = {"platform": "google_ai_mode", "device": "desktop", "region": "us", "mode": "web_search"}
CHATGPT = {"platform": "chatgpt_web", "device": "desktop", "region": "us", "mode": "web_search"}


def vendor_tasks(simulator: SimulatorHandle, surface: str) -> list[dict[str, Any]]:
    """Every task the simulated vendor created for the surface, from its own log."""
    return [a for a in simulator.answers(surface) if a.get("upstream_id")]


def _crash_then_rescue(procs: Procs, simulator: SimulatorHandle, target: dict[str, str]) -> Run:
    run = launch(targets=[target], questions=3)
    doomed = procs.worker("w1", concurrency=1, env={"GEO_FAILPOINTS": "after_accept_before_record"})
    wait_killed(doomed)
    in_flight = list(Sample.objects.filter(run=run, submission_state="submitting"))
    assert in_flight  # the batch the vendor accepted in one task_post
    assert len(vendor_tasks(simulator, target["platform"])) == len(in_flight)
    for sample in in_flight:
        assert list(sample.attempt_set.values_list("status", flat=True)) == ["started"]

    rescuer = procs.worker("w2")
    # Finished, and every attempt's cost booked: costs are queued with the attempt's outcome
    # and booked by a later dispatcher tick (or the run end's event), so a run can be finished
    # a tick before its last cost is in the ledger.
    drive(lambda: run_finished(run)() and not _costs_queued(run), timeout=90)
    assert outcomes(rescuer).count("verified-accepted") == len(in_flight)
    return run


def _costs_queued(run: Run) -> bool:
    return PendingAttemptCost.objects.filter(run_id=run.pk).exists()


def _one_task_per_sample(simulator: SimulatorHandle, run: Run, surface: str) -> None:
    tasks = {t["tag"]: t["upstream_id"] for t in vendor_tasks(simulator, surface)}
    assert len(tasks) == len(vendor_tasks(simulator, surface)) == 3  # no tag posted twice
    recorded = dict(
        Attempt.objects.filter(sample__run=run).values_list("idempotency_key", "upstream_id")
    )
    assert tasks == recorded
    for sample in Sample.objects.filter(run=run):
        assert (sample.submission_state, sample.collection_state) == ("accepted", "completed")
        assert list(sample.attempt_set.values_list("status", flat=True)) == ["accepted"]


def test_a_serp_task_is_found_by_its_tag_posted_once_and_its_cost_booked_once(
    procs: Procs, simulator: SimulatorHandle
) -> None:
    run = _crash_then_rescue(procs, simulator, AI_MODE)
    _one_task_per_sample(simulator, run, "google_ai_mode")

    # Each task's charge (id_list's `cost` for the ones found again, task_post's for the
    # rest): once per task in reconciliation, none unknown.
    report = reconcile(run_id=run.pk)
    rows = [r for r in report.rows if r.platform == "google_ai_mode"]
    recorded = {r.upstream_id: r.recorded_cost for r in rows}
    assert set(recorded) == set(
        Sample.objects.filter(run=run).values_list("upstream_id", flat=True)
    )
    assert all(cost == 1 for cost in recorded.values())  # $0.0012, rounded up to a cent
    assert report.count("cost_unknown") == 0
    assert list(Attempt.objects.filter(sample__run=run).values_list("cost", flat=True)) == [1] * 3
    assert_invariants(run)


def test_an_llm_scraper_task_is_found_by_its_tag_among_the_ready_ones_and_posted_once(
    procs: Procs, simulator: SimulatorHandle
) -> None:
    run = _crash_then_rescue(procs, simulator, CHATGPT)
    _one_task_per_sample(simulator, run, "chatgpt_web")
    assert_invariants(run)
