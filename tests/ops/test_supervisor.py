"""geo_collect.processes.Supervisor: restarts a child that exited and says so; gives up with
the children's last log lines once the watched work stops moving."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from geo_collect.processes import ManagedProcess, Stalled, Supervisor
from tests.dispatching import wait_until


def _child(tmp_path: Path, name: str, code: str) -> ManagedProcess:
    return ManagedProcess(name, [sys.executable, "-c", code], log_path=tmp_path / f"{name}.log")


def test_a_child_that_exits_is_started_again_and_the_restart_is_said(tmp_path: Path) -> None:
    said: list[str] = []
    restarted: list[str] = []
    child = _child(tmp_path, "worker", "print('working', flush=True); raise SystemExit(3)")
    supervisor = Supervisor([child], say=said.append, on_restart=lambda c: restarted.append(c.name))
    supervisor.start()
    try:
        wait_until(lambda: not child.alive(), pause=0.05)
        supervisor.tick()
        assert child.starts == 2 and restarted == ["worker"]
        assert said[0].startswith("started worker (pid ")
        assert said[1].startswith("worker exited with 3; restarted (pid ")
        # Both starts logged to the same file.
        wait_until(lambda: child.text().count("working") == 2, pause=0.05)
    finally:
        supervisor.stop()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_no_progress_for_the_stall_limit_fails_with_the_last_log_lines(tmp_path: Path) -> None:
    clock = Clock()
    code = "import time; print('stuck on the database', flush=True); time.sleep(60)"
    child = _child(tmp_path, "dispatcher", code)
    supervisor = Supervisor([child], stall_seconds=120, say=lambda _: None, clock=clock)
    supervisor.start()
    try:
        wait_until(lambda: "stuck" in child.text(), pause=0.05)
        supervisor.progress("same")
        clock.now += 120
        supervisor.tick()  # at the limit, not past it
        clock.now += 1
        supervisor.progress("same")  # the marker did not change: no progress
        with pytest.raises(Stalled) as stalled:
            supervisor.tick()
        assert "no progress for 120s" in str(stalled.value)
        assert "last 20 lines of dispatcher" in str(stalled.value)
        assert "stuck on the database" in str(stalled.value)
    finally:
        supervisor.stop()


def test_progress_resets_the_stall_clock() -> None:
    clock = Clock()
    supervisor = Supervisor([], stall_seconds=120, say=lambda _: None, clock=clock)
    for marker in range(5):
        clock.now += 100
        supervisor.progress(marker)
        supervisor.tick()  # never stalls while the marker moves
    clock.now += 121
    with pytest.raises(Stalled):
        supervisor.tick()
