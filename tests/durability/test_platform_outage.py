"""Every platform unreachable for a while (issue 30: the simulator killed for 45 s failed 271 of
420 samples for good within 35 s, 26 accepted provider tasks after 8 failed polls, and a resume
submitted those again). Real worker and dispatcher processes reach the simulator through a TCP
proxy on loopback that the test closes (connections cut, new ones refused) and reopens. The
circuits (pipeline/circuits.py) hold the platforms' steps meanwhile, with their thresholds and
cooldowns set by the same settings as in production, shortened."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from billing.reconciliation import reconcile
from geo_collect.logs import messages
from pipeline.models import Circuit
from sampling.models import Attempt, Sample
from simulator import SimulatorHandle
from tests.tcp_proxy import TcpProxy, proxy_to

from .conftest import (
    COLLECTOR,
    IN_PROCESSES,
    OPENAI,
    Procs,
    assert_invariants,
    collector_tasks,
    run_finished,
)
from .conftest import launch as launch_run

pytestmark = IN_PROCESSES

OUTAGE_SECONDS = 15.0
QUESTIONS = 20  # per platform
CIRCUIT_ENV = {
    "GEO_CIRCUIT_FAILURES": "3",
    "GEO_CIRCUIT_WINDOW_SECONDS": "30",
    "GEO_CIRCUIT_OPEN_SECONDS": "2",
    "GEO_CIRCUIT_MAX_OPEN_SECONDS": "4",
    "GEO_CIRCUIT_PROBES": "1",
    "GEO_CIRCUIT_REFRESH_SECONDS": "0.5",
    # A direct request cut in the air by the outage is asked again after 3 s (point 5 of the
    # issue), not parked for a person: the run finishes by itself.
    "GEO_OPENAI_UNCERTAIN_REASK_SECONDS": "3",
}


@pytest.fixture
def platform_proxy(simulator: SimulatorHandle) -> Iterator[TcpProxy]:
    url = urlsplit(simulator.base_url)
    with proxy_to(url.hostname or "127.0.0.1", url.port or 80) as proxy:
        yield proxy


def _wait(condition: object, *, timeout: float, describe: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out: {describe}"
        time.sleep(0.1)


def _ended(run: object) -> bool:
    """Every sample done, or parked for a person (a direct answer cut in the air)."""
    return not Sample.objects.filter(run=run).exclude(queue_state__in=["done", "parked"]).exists()


def _tasks_per_sample(simulator: SimulatorHandle) -> Counter[str]:
    """Provider tasks by the sample they were created for (client key run:sample:attempt)."""
    return Counter(task["client_key"].rsplit(":", 1)[0] for task in collector_tasks(simulator))


def test_an_outage_of_every_platform_fails_no_sample_and_makes_no_second_task(
    procs: Procs, simulator: SimulatorHandle, platform_proxy: TcpProxy
) -> None:
    # Answers take a moment and provider tasks need several polls, so steps of every kind are
    # out when the platforms go: submits, polls of accepted tasks, evidence fetches.
    simulator.configure(profile={"latency_ms": [50, 150], "collector": {"polls_until_done": 6}})
    run = launch_run(targets=[OPENAI, COLLECTOR], questions=QUESTIONS)
    env = {"GEO_UPSTREAM_BASE_URL": f"http://127.0.0.1:{platform_proxy.port}", **CIRCUIT_ENV}
    worker = procs.worker("w1", env=env)
    dispatcher = procs.dispatcher("dispatcher", "--run", str(run.pk), env=env)
    samples = Sample.objects.filter(run=run)
    _wait(
        lambda: (
            samples.filter(platform="collector", step="poll").count() >= 3
            and samples.filter(platform="openai", step="submit").exists()
        ),
        timeout=60,
        describe="provider tasks accepted and direct submits still to go",
    )

    platform_proxy.cut()
    cut_at = time.monotonic()
    _wait(
        lambda: Circuit.objects.filter(state="open").count() == 2,
        timeout=OUTAGE_SECONDS,
        describe="both platforms' circuits open",
    )
    time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - cut_at)))
    during = samples.filter(collection_state="failed").count()
    platform_proxy.restore()

    _wait(lambda: _ended(run), timeout=120, describe="every sample done or parked")
    assert during == 0
    assert not samples.filter(collection_state="failed").exists(), list(
        samples.filter(collection_state="failed").values_list("failure_reason", flat=True)
    )
    # Every provider task was polled through the outage; none was submitted twice.
    tasks = _tasks_per_sample(simulator)
    assert len(tasks) == QUESTIONS
    assert set(tasks.values()) == {1}
    # The platforms' calls waited together: the refused attempts are those before each
    # circuit opened (a provider batch of 4 is one call) and the probes, not a retry of every
    # sample every few seconds of the outage (40 samples, backoffs of 1, 2, 4, 8 s).
    refused = Attempt.objects.filter(sample__run=run, error_class="unreachable").count()
    assert 0 < refused < 3 * QUESTIONS
    # Nothing waits for a person: a direct request cut in the air was asked again.
    assert not samples.filter(queue_state="parked").exists()
    assert samples.filter(collection_state="completed").count() == 2 * QUESTIONS
    logged = [m for proc in (worker, dispatcher) for m in messages(proc.text())]
    # Each platform's circuit opened (once, or again should a call fail just after it
    # closed: how often depends on the machine's timing, not on the product's promise).
    opened = {m.split("platform=")[1].split()[0] for m in logged if "circuit opened platform=" in m}
    assert opened == {"openai", "collector"}, worker.tail(40)
    assert sum("circuit closed platform=" in m for m in logged) >= 2
    assert Circuit.objects.exclude(state="closed").count() == 0
    reasked = Attempt.objects.filter(sample__run=run, error_class="reasked_unknown").count()
    print(f"outage figures: refused attempts {refused}, re-asked uncertain {reasked}")
    _wait(run_finished(run), timeout=30, describe="the run finished by itself")
    assert_invariants(run)
    assert reconcile(run_id=run.pk).count("cost_unknown") == reasked


def test_a_worker_killed_mid_answer_is_asked_again_by_policy_without_a_person(
    procs: Procs, simulator: SimulatorHandle
) -> None:
    """The crash point of tests/durability/test_crash_points.py that parks an OpenAI sample
    for a person, with the platform's uncertain policy set to ask again: the run finishes by
    itself, the lost attempt's cost flagged unknown in reconciliation."""
    run = launch_run(targets=[OPENAI], questions=3)
    doomed = procs.worker("w1", concurrency=1, env={"GEO_FAILPOINTS": "after_accept_before_record"})
    dispatcher = procs.dispatcher("dispatcher", "--run", str(run.pk))
    _wait(lambda: not doomed.alive(), timeout=60, describe="the worker killed mid-answer")
    lost = Sample.objects.get(run=run, submission_state="submitting")
    question = lost.question_revision.text

    procs.worker("w2", env={"GEO_OPENAI_UNCERTAIN_REASK_SECONDS": "1"})
    _wait(lambda: not dispatcher.alive(), timeout=90, describe="the run finished")

    assert dispatcher.popen.returncode == 0, dispatcher.tail(40)
    lost.refresh_from_db()
    assert (lost.collection_state, lost.queue_state) == ("completed", "done")
    assert list(lost.attempt_set.values_list("status", "error_class")) == [
        ("failed", "reasked_unknown"),
        ("accepted", ""),
    ]
    asked = [a for a in simulator.answers("openai") if a["question"] == question]
    assert len(asked) == 2  # the lost answer, and the one asked again
    unknown = [r for r in reconcile(run_id=run.pk).rows if r.status == "cost_unknown"]
    assert [r.sample_id for r in unknown] == [lost.pk]
    assert_invariants(run)
