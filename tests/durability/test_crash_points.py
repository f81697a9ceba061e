"""One test per crash point (docs/architecture.md, Invariants), in real processes: the
process is killed by the failpoint (SIGKILL, checked), a fresh one takes over, and the
invariants hold afterwards."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings as django_settings

from analysis.models import Mention
from evidence.models import Capture, EvidenceObject
from sampling.models import AnswerInbox, Attempt, OutboxMessage, Run, Sample
from simulator import SimulatorHandle
from tests.dispatching import wait_until

from .conftest import (
    COLLECTOR,
    IN_PROCESSES,
    OPENAI,
    Procs,
    assert_invariants,
    collector_tasks,
    drive,
    launch,
    outcomes,
    run_finished,
    run_status_json,
    wait_killed,
)

pytestmark = IN_PROCESSES


def _one_accepted_attempt_each(run: Run) -> None:
    for sample in Sample.objects.filter(run=run):
        attempts = list(sample.attempt_set.values_list("status", "upstream_id"))
        assert attempts == [("accepted", sample.upstream_id)], (sample.pk, attempts)


def _one_task_per_sample(simulator: SimulatorHandle, run: Run) -> None:
    """The provider's own log: one task per sample, and it is the one we recorded."""
    tasks = {t["client_key"]: t["task_id"] for t in collector_tasks(simulator)}
    assert len(tasks) == len(collector_tasks(simulator))  # no key submitted twice
    recorded = dict(
        Attempt.objects.filter(sample__run=run).values_list("idempotency_key", "upstream_id")
    )
    assert tasks == recorded


# --- after the business commit, before the message is published ------------------------------


def test_dispatcher_killed_after_claim_commit_before_publish(
    procs: Procs, simulator: SimulatorHandle, broker: redis.Redis
) -> None:
    run = launch(targets=[COLLECTOR], questions=3)
    worker = procs.worker("w1")
    armed = {"GEO_FAILPOINTS": "after_commit_before_publish"}

    first = procs.dispatcher("dispatcher-1", "--run", str(run.pk), env=armed)
    wait_killed(first, drive=False)

    # The claim committed (leases taken, tokens moved), nothing reached the broker.
    leased = dict(
        Sample.objects.filter(run=run, queue_state="leased").values_list("pk", "fencing_token")
    )
    assert leased
    assert broker.llen("platform.collector") == 0
    assert outcomes(worker) == []

    # A fresh dispatcher, armed the same way: the point fired once for this directory. The
    # leases run out, the sweeper makes the samples claimable again and they are published.
    second = procs.dispatcher("dispatcher-2", "--run", str(run.pk), env=armed)
    second.popen.wait(timeout=90)
    assert second.popen.returncode == 0, second.text()

    assert run_finished(run)()
    # The samples claimed by the dead dispatcher were submitted under a later claim.
    for sample_id, token in leased.items():
        attempt = Attempt.objects.get(sample_id=sample_id)
        assert attempt.fencing_token > token
    _one_accepted_attempt_each(run)
    _one_task_per_sample(simulator, run)
    assert_invariants(run)


def test_dispatcher_killed_after_outbox_commit_before_publish(
    procs: Procs, monkeypatch: pytest.MonkeyPatch, broker: redis.Redis
) -> None:
    run = launch(targets=[OPENAI], questions=2)
    worker = procs.worker("w1")
    # Phase 1: the in-test dispatcher claims work but does not relay the outbox, so the
    # run-finished row the last sample writes stays committed and unpublished.
    monkeypatch.setattr("pipeline.dispatch.relay_outbox", lambda **kwargs: 0)
    drive(run_finished(run))
    row = OutboxMessage.objects.get(dedupe_key=f"run-finished:{run.pk}")
    assert row.sent_at is None

    armed = {"GEO_FAILPOINTS": "after_commit_before_publish"}
    first = procs.dispatcher("dispatcher-1", "--once", env=armed)
    wait_killed(first, drive=False)
    row.refresh_from_db()
    assert row.sent_at is None and broker.llen("default") == 0

    second = procs.dispatcher("dispatcher-2", "--once", env=armed)
    second.popen.wait(timeout=60)
    assert second.popen.returncode == 0, second.text()
    row.refresh_from_db()
    assert row.sent_at is not None

    # The relayed message reached a worker: the run's end was handled (once).
    wait_until(lambda: f"run finished run={run.pk}" in worker.text(), pause=0.2)
    assert worker.text().count(f"run finished run={run.pk}") == 1
    assert_invariants(run)


# --- after the upstream accepted, before we recorded it -------------------------------------


def test_worker_killed_after_accept_before_record_is_verified_by_key(
    procs: Procs, simulator: SimulatorHandle
) -> None:
    """The collector can be asked by idempotency key: each sample of the batch in flight ends
    accepted through verification, with exactly the one upstream task created before the
    crash."""
    run = launch(targets=[COLLECTOR], questions=3)
    doomed = procs.worker("w1", concurrency=1, env={"GEO_FAILPOINTS": "after_accept_before_record"})
    wait_killed(doomed)

    in_flight = list(Sample.objects.filter(run=run, submission_state="submitting"))
    assert in_flight  # the samples of the batch the provider accepted in one call
    for sample in in_flight:
        assert list(sample.attempt_set.values_list("status", flat=True)) == ["started"]
    assert len(collector_tasks(simulator)) >= len(in_flight)  # the provider accepted them

    rescuer = procs.worker("w2")
    drive(run_finished(run))

    for sample in in_flight:
        sample.refresh_from_db()
        assert (sample.submission_state, sample.collection_state) == ("accepted", "completed")
    assert outcomes(rescuer).count("uncertain") == len(in_flight)
    assert outcomes(rescuer).count("verified-accepted") == len(in_flight)
    _one_accepted_attempt_each(run)
    _one_task_per_sample(simulator, run)
    assert run_status_json(run)["outcome"] == "all_succeeded"
    assert_invariants(run)


def test_worker_killed_after_accept_before_record_without_lookup_is_kept_for_review(
    procs: Procs, simulator: SimulatorHandle
) -> None:
    """OpenAI cannot be asked whether it ran a request: the sample stays uncertain and is
    parked for a person, shown as such — it is never asked again."""
    run = launch(targets=[OPENAI], questions=3)
    doomed = procs.worker("w1", concurrency=1, env={"GEO_FAILPOINTS": "after_accept_before_record"})
    wait_killed(doomed)
    in_flight = Sample.objects.get(run=run, submission_state="submitting")
    question = in_flight.question_revision.text

    procs.worker("w2")
    drive(lambda: not Sample.objects.filter(run=run, queue_state__in=["ready", "leased"]).exists())

    in_flight.refresh_from_db()
    assert (in_flight.submission_state, in_flight.queue_state, in_flight.step) == (
        "uncertain",
        "parked",
        "verify",
    )
    assert "cannot confirm acceptance" in in_flight.failure_reason
    assert list(in_flight.attempt_set.values_list("status", flat=True)) == ["started"]
    # The upstream saw the question once; it was not asked again.
    asked = [a for a in simulator.answers("openai") if a["question"] == question]
    assert len(asked) == 1
    status = run_status_json(run)
    assert status["uncertain"] == status["parked"] == status["pending"] == 1
    assert status["succeeded"] == 2 and not status["finished"]
    assert status["layers"]["submission"] == {"accepted": 2, "uncertain": 1}
    assert Run.objects.get(pk=run.pk).finished_at is None
    assert_invariants(run)


# --- after the answer is stored, before the sample is completed ------------------------------


def _objects_on_disk(run: Run, sample: Sample) -> list[Path]:
    root = Path(django_settings.MEDIA_ROOT) / run.config_snapshot["tenant"] / str(run.pk)
    return [p for p in (root / str(sample.pk)).rglob("*") if p.is_file()]


def test_worker_killed_after_store_before_complete(
    procs: Procs, simulator: SimulatorHandle
) -> None:
    run = launch(targets=[COLLECTOR], questions=3)
    doomed = procs.worker(
        "w1", concurrency=1, env={"GEO_FAILPOINTS": "after_store_before_complete"}
    )
    wait_killed(doomed)
    # The one sample whose answer reached storage while its rows never did.
    [victim] = [
        s
        for s in Sample.objects.filter(run=run, step="evidence")
        if _objects_on_disk(run, s) and not Capture.objects.filter(sample=s).exists()
    ]
    stored_before = _objects_on_disk(run, victim)

    procs.worker("w2")
    drive(run_finished(run))

    victim.refresh_from_db()
    assert (victim.collection_state, victim.analysis_state) == ("completed", "accepted")
    # One capture, one set of rows; the objects written before the crash are unreferenced.
    assert Capture.objects.filter(sample=victim).count() == 1
    referenced = set(
        EvidenceObject.objects.filter(capture__sample=victim).values_list("key", flat=True)
    )
    on_disk = _objects_on_disk(run, victim)
    assert len(on_disk) == len(referenced) + len(stored_before)
    assert Mention.objects.filter(sample=victim).values("entity").distinct().count() == (
        Mention.objects.filter(sample=victim).count()
    )
    _one_accepted_attempt_each(run)
    _one_task_per_sample(simulator, run)
    assert_invariants(run)


@pytest.mark.parametrize("point", ["after_inbox_before_archive", "after_store_before_complete"])
def test_a_direct_answer_kept_before_a_worker_died_is_archived_from_the_inbox(
    procs: Procs, simulator: SimulatorHandle, point: str
) -> None:
    """A direct API answered in the submit call; the worker kept the answer in the inbox
    (committed with its attempt's outcome and cost) and died before archiving it, or after
    archiving and before recording it. The next claim archives the kept answer: the sample
    succeeds and the upstream is not asked again."""
    run = launch(targets=[OPENAI], questions=2)
    doomed = procs.worker("w1", concurrency=1, env={"GEO_FAILPOINTS": point})
    wait_killed(doomed)
    [victim] = Sample.objects.filter(run=run, step="archive")
    assert victim.submission_state == "accepted"
    assert AnswerInbox.objects.filter(sample=victim).count() == 1
    assert list(victim.attempt_set.values_list("status", flat=True)) == ["accepted"]

    procs.worker("w2")
    drive(run_finished(run))

    victim.refresh_from_db()
    assert (victim.collection_state, victim.evidence_state, victim.analysis_state) == (
        "completed",
        "stored",
        "accepted",
    )
    assert Capture.objects.filter(sample=victim).count() == 1
    assert not AnswerInbox.objects.filter(sample__run=run).exists()
    # The simulator's own log: each question asked once, the victim's included.
    asked = Counter(a["question"] for a in simulator.answers("openai"))
    assert sorted(asked.values()) == [1, 1]
    assert victim.question_revision.text in asked
    _one_accepted_attempt_each(run)
    assert run_status_json(run)["outcome"] == "all_succeeded"
    assert_invariants(run)


def test_a_worker_killed_mid_message_loses_none_of_its_steps(
    procs: Procs, simulator: SimulatorHandle, settings: Any
) -> None:
    """A message of several claims (`pipeline.execute_steps`): its worker dies as soon as one
    of its steps has kept its answer, the others still in hand. Each kept answer is archived
    from the inbox and never asked for again; an answer that died with the worker is verified
    and asked again by the platform's policy; the run finishes by itself."""
    settings.GEO_STEPS_PER_MESSAGE = 3
    run = launch(targets=[OPENAI], questions=3)
    doomed = procs.worker("w1", concurrency=1, env={"GEO_FAILPOINTS": "after_inbox_before_archive"})
    wait_killed(doomed)
    assert len(_RECEIVED_STEPS.findall(doomed.text())) == 1  # one message carried all three
    kept = list(Sample.objects.filter(run=run, step="archive"))
    assert kept  # the step that reached the point, at least

    procs.worker("w2", env={"GEO_OPENAI_UNCERTAIN_REASK_SECONDS": "1"})
    drive(run_finished(run), timeout=90)

    assert run_status_json(run)["outcome"] == "all_succeeded"
    asked = Counter(a["question"] for a in simulator.answers("openai"))
    assert [asked[sample.question_revision.text] for sample in kept] == [1] * len(kept)
    assert not AnswerInbox.objects.filter(sample__run=run).exists()
    assert_invariants(run)


_RECEIVED_STEPS = re.compile(r"Task pipeline\.execute_steps\[[0-9a-f-]+\] received")


# --- after completion, before the message is acknowledged -----------------------------------


_RECEIVED = re.compile(r"Task pipeline\.execute_\w+\[([0-9a-f-]+)\] received")


def test_worker_killed_after_complete_before_ack(
    procs: Procs, simulator: SimulatorHandle, broker: redis.Redis
) -> None:
    run = launch(targets=[COLLECTOR], questions=3)
    doomed = procs.worker("w1", concurrency=1, env={"GEO_FAILPOINTS": "after_complete_before_ack"})
    wait_killed(doomed)
    # The step committed and its message was never acknowledged. The broker keeps no copy of
    # a step message (geo_collect/broker_redis.py): the sample's lease is what redelivers.
    assert outcomes(doomed) == []
    [task_id] = _RECEIVED.findall(doomed.text())
    assert broker.hlen("unacked") == 0

    rescuer = procs.worker("w2")
    drive(run_finished(run))
    assert task_id not in rescuer.text()  # the committed step was not run a second time
    _one_accepted_attempt_each(run)
    _one_task_per_sample(simulator, run)
    assert Capture.objects.filter(sample__run=run).count() == 3
    assert_invariants(run)
