"""Redis restarted mid-run, without persistence: every queued and unacknowledged message is
gone. PostgreSQL still knows what is due; leases run out, the sweeper makes the work
claimable again and the dispatcher publishes it anew. Everything here runs on a private
redis-server, so restarting it disturbs nothing else."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from geo_collect.processes import redis_answers, redis_server_command
from sampling.models import Sample
from simulator import SimulatorHandle
from tests.dispatching import wait_until

from .conftest import (
    COLLECTOR,
    IN_PROCESSES,
    Procs,
    assert_invariants,
    collector_tasks,
    launch,
    run_finished,
    samples_summary,
)

pytestmark = [*IN_PROCESSES, pytest.mark.needs_binary("redis-server")]


class PrivateRedis:
    def __init__(self, directory: Path) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            redis_server_command(port=self.port, directory=self.directory),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if not redis_answers(self.port):
            raise AssertionError("redis-server did not start")

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    if server.process is not None and server.process.poll() is None:
        server.kill()


def test_a_redis_restart_mid_run_loses_messages_but_no_work(
    procs: Procs, simulator: SimulatorHandle, private_redis: PrivateRedis
) -> None:
    simulator.configure(profile={"collector": {"polls_until_done": 3}})
    run = launch(targets=[COLLECTOR], questions=12)
    env = {"REDIS_URL": private_redis.url}
    worker = procs.worker("w1", env=env, ready=False)
    dispatcher = procs.dispatcher("dispatcher", "--run", str(run.pk), env=env)
    samples = Sample.objects.filter(run=run)

    # Once work is under way and messages wait in Redis, kill it. Waiting counts the queues and
    # the messages a worker has taken but not acknowledged (kombu's `unacked` hash): the queues
    # alone drain between the dispatcher's ticks, so on a busy machine a look at them alone can
    # miss every moment they held something (a CI run did).
    client = redis.Redis(port=private_redis.port)
    queues = ("platform.collector", "evidence", "analysis")

    def waiting() -> int:
        return sum(client.llen(q) for q in queues) + client.hlen("unacked")

    wait_until(
        lambda: samples.filter(queue_state="done").exists() and waiting() > 0,
        timeout=120,
        pause=0.02,
        describe=lambda: f"waiting={waiting()}, samples: {samples_summary()}",
    )
    lost = waiting()
    assert lost > 0 and samples.exclude(queue_state="done").exists()
    private_redis.kill()  # queued and unacknowledged messages are gone with it
    time.sleep(1.0)
    private_redis.start()

    # The worker may exit on losing its broker (a Celery/kombu failure mode seen in chaos
    # runs); production runs workers under a supervisor, so does this test.
    restarts = 0

    def supervise_worker() -> None:
        nonlocal worker, restarts
        if not worker.alive():
            restarts += 1
            worker = procs.worker(f"w1-restart{restarts}", env=env, ready=False)

    wait_until(lambda: not dispatcher.alive(), timeout=90, pause=0.2, tick=supervise_worker)
    assert dispatcher.popen.returncode == 0, dispatcher.text()[-3000:]

    assert run_finished(run)()
    assert set(samples.values_list("queue_state", flat=True)) == {"done"}
    # The sweeper took back the leases whose messages Redis lost.
    requeued = sum(
        int(part.split("=", 1)[1])
        for part in dispatcher.text().split()
        if part.startswith("requeued=")
    )
    assert requeued >= 1, dispatcher.text()
    for sample in samples:
        assert list(sample.attempt_set.values_list("status", flat=True)) == ["accepted"]
    tasks = collector_tasks(simulator)
    assert len(tasks) == len({t["client_key"] for t in tasks}) == 12
    assert_invariants(run)
