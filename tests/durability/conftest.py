"""Real processes for fault injection: Celery workers and dispatchers as subprocesses on
Redis and the test database, the simulator over HTTP, failpoints armed by environment.

Leases are short (3 s) in every process, so recovery after a kill takes seconds; each
failpoint fires once per test (GEO_FAILPOINT_DIR is the test's own directory).
"""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings as django_settings
from django.core.management import call_command

from geo_collect.logs import messages
from geo_collect.processes import (
    ALL_QUEUES,
    ManagedProcess,
    dispatcher_command,
    stop_all,
    worker_command,
)
from pipeline.invariants import check_all
from sampling.models import Run, Sample
from simulator import SimulatorHandle
from tests.conftest import launch_funded, make_campaign_data
from tests.dispatching import tick_until, wait_until
from tests.services import broker_url, database_url, empty_broker, simulator_fixture

LEASE_SECONDS = 3
VISIBILITY_TIMEOUT = 2
PLATFORM_CAP = 4  # leased upstream steps per platform in the in-test dispatcher
# One claim per message: most of these tests kill a worker holding one step and name its one
# victim. A message of several steps killed mid-way has a test of its own
# (test_crash_points.py, `test_a_worker_killed_mid_message_loses_none_of_its_steps`).
STEPS_PER_MESSAGE = 1

OPENAI = {"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"}
COLLECTOR = {"platform": "collector", "device": "desktop", "region": "us", "mode": "web_search"}
ANTHROPIC = {"platform": "anthropic", "device": "desktop", "region": "us", "mode": "web_search"}


# Every durability test: real processes, committed transactions, leases as short as the workers'.
IN_PROCESSES = [
    pytest.mark.e2e,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("short_leases"),
]


# --- services ---------------------------------------------------------------------------------


@pytest.fixture
def broker() -> Iterator[redis.Redis]:
    with empty_broker(broker_url("durability tests")) as client:
        yield client


simulator = simulator_fixture(seed=11)


@pytest.fixture
def short_leases(settings: Any) -> None:
    """The in-test dispatcher leases for as long as the workers renew for."""
    settings.GEO_LEASE_SECONDS = LEASE_SECONDS
    settings.GEO_PLATFORM_CONCURRENCY = PLATFORM_CAP
    settings.GEO_STEPS_PER_MESSAGE = STEPS_PER_MESSAGE


# --- processes --------------------------------------------------------------------------------


Proc = ManagedProcess


@dataclass
class Procs:
    """Starts workers and dispatchers with one environment; stops what it started."""

    env: dict[str, str]
    tmp: Path
    started: list[Proc] = field(default_factory=list)

    def _spawn(self, name: str, command: list[str], env: dict[str, str] | None) -> Proc:
        proc = Proc(name, command, {**self.env, **(env or {})}, self.tmp / f"{name}.log")
        self.started.append(proc.start())
        return proc

    def worker(
        self,
        name: str,
        *,
        queues: Iterable[str] = ALL_QUEUES,
        concurrency: int = 4,
        env: dict[str, str] | None = None,
        ready: bool = True,
    ) -> Proc:
        """A `celery worker` on a thread pool, logging at INFO so each task's outcome (the
        string run_step returns) is in its log."""
        command = worker_command(
            name=f"{name}@durability", queues=queues, concurrency=concurrency, loglevel="INFO"
        )
        proc = self._spawn(name, command, env)
        if ready:
            wait_ready(proc)
        return proc

    def dispatcher(self, name: str, *args: str, env: dict[str, str] | None = None) -> Proc:
        return self._spawn(name, dispatcher_command(interval=0.2, extra=args), env)

    def stop_all(self) -> None:
        stop_all(self.started, timeout=15)


@pytest.fixture
def failpoint_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "failpoints"
    directory.mkdir()
    return directory


@pytest.fixture
def procs(
    broker: redis.Redis, simulator: SimulatorHandle, tmp_path: Path, failpoint_dir: Path
) -> Iterator[Procs]:
    env = {
        "DATABASE_URL": database_url(),
        "REDIS_URL": os.environ["REDIS_URL"],
        "GEO_UPSTREAM_BASE_URL": simulator.base_url,
        "GEO_VAR_DIR": str(django_settings.VAR_DIR),
        "GEO_LEASE_SECONDS": str(LEASE_SECONDS),
        "GEO_VISIBILITY_TIMEOUT": str(VISIBILITY_TIMEOUT),
        "GEO_MAX_SUBMIT_ATTEMPTS": "3",
        "GEO_PLATFORM_CONCURRENCY": str(PLATFORM_CAP),
        "GEO_STEPS_PER_MESSAGE": str(STEPS_PER_MESSAGE),
        "GEO_FAILPOINT_DIR": str(failpoint_dir),
        "GEO_LOG_LEVEL": "INFO",
        "GEO_FAILPOINTS": "",
    }
    manager = Procs(env=env, tmp=tmp_path)
    yield manager
    manager.stop_all()


def wait_ready(proc: Proc, *, timeout: float = 30.0) -> None:
    """Until the worker answers a control ping (it is consuming its queues)."""
    from geo_collect.celery import app

    def answers() -> bool:
        if not proc.alive():
            raise AssertionError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.text()}")
        return bool(app.control.ping(destination=[f"{proc.name}@durability"], timeout=0.5))

    wait_until(
        answers,
        timeout=timeout,
        pause=0.0,  # the ping waits half a second itself
        describe=lambda: f"{proc.name} did not become ready:\n{proc.text()[-3000:]}",
    )


def wait_killed(proc: Proc, *, drive: bool = True, timeout: float = 60.0) -> None:
    """Until `proc` dies, ticking the dispatcher unless `drive=False`; it must have died of
    SIGKILL (a failpoint)."""

    def dead() -> bool:
        return not proc.alive()

    def log() -> str:
        return f"{proc.name} was not killed:\n{proc.text()[-3000:]}"

    if drive:
        tick_until(dead, timeout=timeout, pause=0.1, describe=log)
    else:
        wait_until(dead, timeout=timeout, describe=log)
    assert proc.popen.returncode == -signal.SIGKILL, (
        f"{proc.name} exited with {proc.popen.returncode}, not SIGKILL:\n{proc.text()[-3000:]}"
    )


def drive(
    until: Callable[[], bool], *, timeout: float = 60.0, on_tick: Callable[[], None] | None = None
) -> None:
    """The dispatcher loop, in the test process, until `until()` holds."""
    tick_until(until, timeout=timeout, pause=0.1, on_tick=on_tick, describe=samples_summary)


def run_finished(run: Run) -> Callable[[], bool]:
    def check() -> bool:
        return Run.objects.filter(pk=run.pk).exclude(finished_at=None).exists()

    return check


def samples_summary() -> str:
    rows = Sample.objects.order_by("pk").values_list(
        "pk", "platform", "step", "queue_state", "submission_state", "collection_state", "claims"
    )
    return "; ".join(" ".join(str(v) for v in row) for row in rows)


# --- runs -------------------------------------------------------------------------------------


def launch(
    *,
    targets: list[dict[str, str]],
    questions: int,
    repeats: int = 1,
    tenant: str = "acme",
    name: str = "plan",
    prefix: str = "",
    screenshot_policy: str = "none",
) -> Run:
    """A launched run. No screenshots unless asked: for direct APIs a screenshot is a
    Chromium rendering on the evidence queue, which these tests are not about."""
    data = make_campaign_data(
        questions=questions, targets=targets, repeats=repeats, tenant=tenant, name=name
    )
    data["screenshot_policy"] = screenshot_policy
    if prefix:
        data["questions"] = [f"{prefix} {q}" for q in data["questions"]]
    return launch_funded(data)


def assert_invariants(run: Run | None = None) -> str:
    """check_invariants, both as the function and as the command (which must exit 0), and
    the ledger's own check (balanced, nothing charged twice)."""
    violations = check_all(run.pk if run else None)
    assert not violations, "\n".join(str(v) for v in violations)
    args = ["--run", str(run.pk)] if run else []
    output = command_output("check_invariants", *args)
    assert command_output("check_ledger").startswith("ledger OK")
    return output


def command_output(name: str, *args: str) -> str:
    from io import StringIO

    out = StringIO()
    call_command(name, *args, stdout=out)
    return out.getvalue()


def run_status_json(run: Run) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(command_output("run_status", str(run.pk), "--json"))
    return data


def collector_tasks(simulator: SimulatorHandle) -> list[dict[str, Any]]:
    """Every task the simulated provider accepted, from its own log."""
    return [a for a in simulator.answers("collector") if a.get("task_id")]


def outcomes(proc: Proc) -> list[str]:
    """The step outcomes a worker logged ("Task pipeline.execute_step[..] succeeded in ..s:
    'outcome'"), and each sample's outcome of a message of several steps or of a batch submit
    ("Task pipeline.execute_steps[..] succeeded in ..s: {id: 'outcome', ...}")."""
    found = []
    for message in messages(proc.text()):
        if " succeeded in " not in message:
            continue
        if "pipeline.execute_step[" in message:
            found.append(message.rsplit(": ", 1)[-1].strip().strip("'"))
        elif "pipeline.execute_submit_batch[" in message or "pipeline.execute_steps[" in message:
            found += re.findall(r"\d+: '([^']*)'", message)
    return found
