"""The steps of one message (`pipeline.execute_steps`) run at the same time, each on its own:
pipeline/execution.py `run_steps_together`."""

from __future__ import annotations

import threading

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
