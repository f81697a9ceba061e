"""Late writers and duplicates: a worker paused past its lease, the same message delivered
twice. Real worker processes; the fencing token decides whose write counts."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from evidence.models import Capture
from pipeline.tasks import execute_step
from sampling.leases import claim_ready
from sampling.models import Attempt, Sample, StaleWrite
from simulator import SimulatorHandle
from tests.dispatching import wait_until

from . import conftest as rig

pytestmark = rig.IN_PROCESSES


def test_worker_paused_past_its_lease_has_its_late_write_refused_and_recorded(
    procs: rig.Procs, simulator: SimulatorHandle
) -> None:
    # The provider takes 6 s to answer the batch submit; the lease is 3 s.
    simulator.configure(profile={"platforms": {"collector": {"latency_ms": [6000, 6000]}}})
    run = rig.launch(targets=[rig.COLLECTOR], questions=1)
    sample = Sample.objects.get(run=run)
    # One thread: while it holds its message it fetches no other (prefetch = concurrency).
    paused = procs.worker("paused", queues=["platform.collector"], concurrency=1)

    # The worker recorded its attempt and is waiting on the upstream: stop it there.
    rig.drive(lambda: Attempt.objects.filter(sample=sample).exists())
    os.kill(paused.pid, signal.SIGSTOP)
    first_token = Attempt.objects.get(sample=sample).fencing_token

    # Its lease runs out (it cannot renew while stopped); the sweeper and a new claim hand
    # the sample to another worker, which verifies the submit by key and finishes it.
    rescuer = procs.worker("rescuer")
    rig.drive(rig.run_finished(run))
    sample.refresh_from_db()
    assert sample.fencing_token > first_token
    assert (sample.submission_state, sample.collection_state) == ("accepted", "completed")
    assert "verified-accepted" in rig.outcomes(rescuer)
    assert not StaleWrite.objects.exists()

    # Resumed, the paused worker gets its (late) answer and tries to record it: refused.
    os.kill(paused.pid, signal.SIGCONT)
    wait_until(lambda: StaleWrite.objects.filter(sample=sample).exists())
    stale = StaleWrite.objects.get(sample=sample)
    assert stale.presented_token == first_token
    assert stale.current_token == sample.fencing_token
    assert stale.operation == "accept"
    wait_until(lambda: "stale-write-refused" in rig.outcomes(paused))

    # Nothing it held was written: one task upstream, one accepted attempt, one capture.
    sample.refresh_from_db()
    assert (sample.submission_state, sample.collection_state, sample.queue_state) == (
        "accepted",
        "completed",
        "done",
    )
    assert len(rig.collector_tasks(simulator)) == 1
    assert list(sample.attempt_set.values_list("status", flat=True)) == ["accepted"]
    assert Capture.objects.filter(sample=sample).count() == 1
    assert not Capture.objects.filter(sample=sample, fencing_token=first_token).exists()
    rig.assert_invariants(run)


def _publish_twice(sample: Sample, queue: str) -> int:
    [claim] = claim_ready(
        platform=sample.platform, limit=1, owner="test-duplicate", lease_seconds=3
    )
    assert claim.sample_id == sample.pk
    for _ in range(2):
        execute_step.apply_async(args=(claim.sample_id, claim.token), queue=queue)
    return claim.token


@pytest.mark.parametrize(
    "target",
    [rig.COLLECTOR, rig.OPENAI],
    ids=["collector", "openai"],
)
def test_the_same_message_delivered_twice_has_one_result(
    procs: rig.Procs, simulator: SimulatorHandle, target: dict[str, str]
) -> None:
    """Two copies of one execute_step message (same sample, same token), consumed at once by
    two threads, then the message once more after the run ended: one submission upstream,
    one answer, one result.

    The second copy finds the attempt of its own lease in flight and leaves it alone."""
    run = rig.launch(targets=[target], questions=1)
    sample = Sample.objects.get(run=run)
    worker = procs.worker("w1", concurrency=4)
    queue = f"platform.{sample.platform}"
    token = _publish_twice(sample, queue)

    rig.drive(
        lambda: not Sample.objects.filter(run=run, queue_state__in=["ready", "leased"]).exists()
    )
    sample.refresh_from_db()
    assert (sample.collection_state, sample.queue_state) == ("completed", "done"), (
        sample.submission_state,
        sample.queue_state,
        sample.failure_reason,
        rig.outcomes(worker),
    )
    # The late third copy does nothing.
    execute_step.apply_async(args=(sample.pk, token), queue=queue)
    wait_until(lambda: "stale-message" in rig.outcomes(worker))
    sample.refresh_from_db()
    # The run ends in the worker thread that ended the sample, after its commit
    # (sampling/steps.py `SampleStep._save`): on a busy machine another thread can
    # answer the late copy first.
    wait_until(rig.run_finished(run))
    assert list(sample.attempt_set.values_list("status", flat=True)) == ["accepted"]
    assert Capture.objects.filter(sample=sample, collection_state="completed").count() == 1
    if sample.platform == "collector":
        assert len(rig.collector_tasks(simulator)) == 1
    else:
        assert len(simulator.answers(sample.platform)) == 1
    rig.assert_invariants(run)


def test_duplicate_provider_callbacks_change_nothing_twice(
    procs: rig.Procs, simulator: SimulatorHandle, live_server: Any, settings: Any
) -> None:
    """The collector signs a callback for every finished task and, here, delivers each one
    twice. The application records each delivery once; the second copy is recognised as a
    repeat. Every sample still has one task, one answer, one charge, one upstream cost."""
    from billing.models import JournalEntry, SampleSettlement
    from sampling.models import CallbackDelivery

    settings.GEO_COLLECTOR_CALLBACK_SECRET = "sim-callback-secret"  # the simulator's default
    simulator.script({"match": "", "fault": "duplicate_callback", "times": None})
    run = rig.launch(targets=[rig.COLLECTOR], questions=4)
    callback_url = f"{live_server.url}/callbacks/collector/"
    procs.worker("w1", env={"GEO_COLLECTOR_CALLBACK_URL": callback_url})
    rig.drive(rig.run_finished(run))

    tasks = rig.collector_tasks(simulator)
    assert len(tasks) == 4
    provider: Any = simulator.sim.protocol("collector")
    wait_until(lambda: all(provider.tasks[t["task_id"]].callbacks_sent == 2 for t in tasks))
    deliveries = CallbackDelivery.objects.filter(provider="collector")
    assert deliveries.count() == 4  # eight deliveries, four recorded
    assert set(deliveries.values_list("task_id", flat=True)) == {t["task_id"] for t in tasks}
    # Charges and upstream costs are queued with the verdict and posted by the dispatcher's
    # next tick (docs/decisions.md): wait for them, then count one of each per sample.
    charged = SampleSettlement.objects.filter(sample__run=run, captured__gt=0)
    wait_until(lambda: charged.count() == 4)
    wait_until(lambda: JournalEntry.objects.filter(kind="upstream_cost", run=run).count() == 4)
    for sample in Sample.objects.filter(run=run):
        assert list(sample.attempt_set.values_list("status", flat=True)) == ["accepted"]
        assert Capture.objects.filter(sample=sample).count() == 1
        assert charged.filter(sample=sample).count() == 1
        assert (
            JournalEntry.objects.filter(
                kind="upstream_cost", upstream_id=sample.upstream_id
            ).count()
            == 1
        )
    rig.assert_invariants(run)
