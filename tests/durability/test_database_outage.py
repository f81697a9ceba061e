"""The database goes away mid-run (a restart drops every connection; an outage refuses new
ones): the dispatcher and the workers keep running, log the outage once when it starts and
once when it ends, and the run finishes by itself. The outage is a TCP proxy on loopback that
the test cuts and restores between the processes and the test database (the machine's shared
PostgreSQL is never restarted)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest

from geo_collect.logs import messages
from sampling.models import Sample
from simulator import SimulatorHandle
from tests.services import database_url
from tests.tcp_proxy import TcpProxy, proxy_to

from .conftest import (
    COLLECTOR,
    IN_PROCESSES,
    OPENAI,
    Proc,
    Procs,
    assert_invariants,
    drive,
    run_finished,
)
from .conftest import launch as launch_run

pytestmark = IN_PROCESSES

OUTAGE_SECONDS = 4.0


@pytest.fixture
def database_proxy() -> Iterator[TcpProxy]:
    url = urlsplit(database_url())
    with proxy_to(url.hostname or "127.0.0.1", url.port or 5432) as proxy:
        yield proxy


def _through(proxy: TcpProxy) -> str:
    url = urlsplit(database_url())
    netloc = url.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{proxy.port}"
    return urlunsplit(url._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))


def _outage(proxy: TcpProxy) -> None:
    proxy.cut()
    time.sleep(OUTAGE_SECONDS)
    proxy.restore()


def _count(proc: Proc, text: str) -> int:
    return sum(text in message for message in messages(proc.text()))


def _under_way(run: object) -> bool:
    samples = Sample.objects.filter(run=run)
    return (
        samples.filter(queue_state="done").exists() and samples.exclude(queue_state="done").exists()
    )


def _wait(condition: object, *, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_the_dispatcher_rides_out_a_database_restart_and_an_outage(
    procs: Procs, database_proxy: TcpProxy
) -> None:
    run = launch_run(targets=[OPENAI, COLLECTOR], questions=8)
    procs.worker("w1", ready=False)
    dispatcher = procs.dispatcher(
        "dispatcher", "--run", str(run.pk), env={"DATABASE_URL": _through(database_proxy)}
    )
    _wait(lambda: _under_way(run), timeout=60)

    database_proxy.cut()  # a restart: every connection dropped, new ones taken again soon
    time.sleep(0.3)
    database_proxy.restore()
    time.sleep(1.0)
    _outage(database_proxy)  # down for a while: connections refused

    deadline = time.monotonic() + 90
    while dispatcher.alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert dispatcher.popen is not None and dispatcher.popen.returncode == 0, dispatcher.tail(40)
    assert run_finished(run)()
    assert _count(dispatcher, "database unreachable (dispatcher)") >= 1
    ended = [m for m in messages(dispatcher.text()) if "database reachable again" in m]
    assert len(ended) == _count(dispatcher, "database unreachable (dispatcher)")
    assert any(float(m.split(" after ")[1].rstrip("s")) >= OUTAGE_SECONDS - 0.5 for m in ended)
    assert_invariants(run)


def test_a_worker_rides_out_a_database_outage_and_the_run_finishes(
    procs: Procs, simulator: SimulatorHandle, database_proxy: TcpProxy
) -> None:
    # The provider path only (polls and evidence, each safe to do again): a direct answer
    # lost to the database in the middle of its submit is point 1 of issue 30, not this test.
    simulator.configure(profile={"collector": {"polls_until_done": 6}})
    run = launch_run(targets=[COLLECTOR], questions=12)
    # Leases longer than the outage (the worker renews them for this long), so a step that
    # waited the outage out (in the pool, or backing off) still holds its token.
    env = {"DATABASE_URL": _through(database_proxy), "GEO_LEASE_SECONDS": "30"}
    worker = procs.worker("w1", env=env)
    polling = Sample.objects.filter(run=run, step="poll")
    drive(polling.exists, timeout=60)

    # The in-test dispatcher (its own connection, not cut) goes on claiming and publishing
    # meanwhile, so the worker receives steps while its database is gone.
    outage = threading.Thread(target=_outage, args=(database_proxy,))
    outage.start()
    drive(run_finished(run), timeout=120)
    outage.join()
    assert worker.alive(), worker.tail(40)
    assert _count(worker, "database unreachable (worker)") == 1, worker.tail(40)
    assert _count(worker, "database reachable again (worker)") == 1, worker.tail(40)
    assert set(Sample.objects.filter(run=run).values_list("queue_state", flat=True)) == {"done"}
    assert_invariants(run)
