"""The steps of one message (`pipeline.execute_steps`) run at the same time, each on its own:
pipeline/execution.py `run_steps_together`."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection, connections

from pipeline.execution import run_steps_together


def test_the_steps_of_one_message_run_at_the_same_time() -> None:
    # Each step waits for the other two: run one after another, the first would time out.
    all_in = threading.Barrier(3, timeout=10)

    def step(sample_id: int, token: int) -> str:
        all_in.wait()
        return f"done:{sample_id}:{token}"

    outcomes = run_steps_together([(1, 11), (2, 12), (3, 13)], step)

    assert outcomes == {1: "done:1:11", 2: "done:2:12", 3: "done:3:13"}


def test_a_step_that_raises_is_an_error_of_its_own_and_the_others_finish() -> None:
    def step(sample_id: int, token: int) -> str:
        if sample_id in (1, 2):
            raise RuntimeError(f"step {sample_id} broke")
        return "answered"

    outcomes = run_steps_together([(1, 1), (2, 1), (3, 1)], step)

    assert outcomes == {1: "error", 2: "error", 3: "answered"}


def test_a_message_without_claims_runs_nothing() -> None:
    assert run_steps_together([], lambda sample_id, token: "never") == {}


@pytest.mark.django_db(transaction=True)
def test_the_first_step_gives_its_connection_back_before_waiting_for_the_others() -> None:
    """Otherwise the threads of a worker's messages could hold every connection of its pool
    while the steps they wait on wait for one."""
    first_done = threading.Event()
    seen: dict[str, Any] = {}

    def step(sample_id: int, token: int) -> str:
        with connection.cursor() as cursor:  # each step uses the database
            cursor.execute("SELECT 1")
        if sample_id == 1:
            seen["first"] = connections["default"]  # this thread's own
            first_done.set()
        else:  # still running: the first's connection is given back while this one runs
            assert first_done.wait(timeout=10)
            deadline = time.monotonic() + 10
            while seen["first"].connection is not None and time.monotonic() < deadline:
                time.sleep(0.01)
            seen["first still connected"] = seen["first"].connection is not None
        return "answered"

    outcomes = run_steps_together([(1, 1), (2, 1)], step)

    assert outcomes == {1: "answered", 2: "answered"}
    assert seen["first still connected"] is False
