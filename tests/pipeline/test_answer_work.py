"""Read answers are processed a few threads at a time (pipeline/step_context.py
`answer_work`; docs/decisions.md, "Answer work, a few threads at a time")."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connections

from connectors.base import SubmitOutcome
from pipeline import execution, step_context
from pipeline.step_context import answer_work, outside_answer_work
from sampling.models import Sample, Step
from tests.pipeline.test_execution import _claim, _result, _sample, upstream  # noqa: F401

# A wait that should end at once, and one that should not end at all while the test holds.
PROMPT, HELD = 10.0, 0.3


def _in_thread(work: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    done: dict[str, Any] = {}

    def run() -> None:
        try:
            done["result"] = work()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, done


def _enter_and_wait(inside: threading.Event, leave: threading.Event) -> Callable[[], None]:
    def work() -> None:
        with answer_work():
            inside.set()
            assert leave.wait(PROMPT)

    return work


def test_no_more_threads_than_the_configured_turns_work_on_answers_at_once(settings: Any) -> None:
    settings.GEO_WORKER_ANSWER_THREADS = 2
    leave = threading.Event()
    inside = [threading.Event() for _ in range(3)]
    threads = [_in_thread(_enter_and_wait(event, leave))[0] for event in inside[:2]]
    assert all(event.wait(PROMPT) for event in inside[:2])

    third, _ = _in_thread(_enter_and_wait(inside[2], leave))

    assert not inside[2].wait(HELD)  # both turns taken: the third waits
    leave.set()
    assert inside[2].wait(PROMPT)  # and gets one when they are given back
    for thread in [*threads, third]:
        thread.join(PROMPT)


def test_a_thread_in_its_turn_that_asks_again_keeps_it(settings: Any) -> None:
    settings.GEO_WORKER_ANSWER_THREADS = 1
    thread, done = _in_thread(_nested)
    thread.join(PROMPT)
    assert done == {"result": "nested"}


def _nested() -> str:
    with answer_work(), answer_work():
        return "nested"


def test_a_wait_outside_answer_work_lets_another_thread_take_the_turn(settings: Any) -> None:
    settings.GEO_WORKER_ANSWER_THREADS = 1
    other_in, other_leave = threading.Event(), threading.Event()
    order: list[str] = []

    def uploads_while_another_works() -> None:
        with answer_work():
            with outside_answer_work():
                _in_thread(_enter_and_wait(other_in, other_leave))
                assert other_in.wait(PROMPT)  # the only turn: the other thread got it
                order.append("other in")
                other_leave.set()
            order.append("back in")  # only once the other gave the turn back

    thread, _ = _in_thread(uploads_while_another_works)
    thread.join(PROMPT)

    assert order == ["other in", "back in"]


def test_a_thread_gives_its_connection_back_only_when_it_must_wait_for_a_turn(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A waiting thread that held a pooled connection would keep it from the threads whose
    turn it is: with every connection held by waiters, nobody could finish."""
    settings.GEO_WORKER_ANSWER_THREADS = 1
    gave_back: list[str] = []
    monkeypatch.setattr(
        step_context,
        "give_connection_back",
        lambda: gave_back.append(threading.current_thread().name),
    )
    leave, inside = threading.Event(), threading.Event()
    first, _ = _in_thread(_enter_and_wait(inside, leave))
    assert inside.wait(PROMPT)
    assert gave_back == []  # a free turn: taken at once, the connection kept

    waiting_inside = threading.Event()
    second, _ = _in_thread(_enter_and_wait(waiting_inside, leave))
    assert not waiting_inside.wait(HELD)

    assert gave_back == [second.name]
    leave.set()
    for thread in (first, second):
        thread.join(PROMPT)


@pytest.mark.django_db(transaction=True)
def test_an_answer_read_waits_for_a_turn_before_it_is_kept(
    upstream: Any,  # noqa: F811
    settings: Any,
) -> None:
    settings.GEO_WORKER_ANSWER_THREADS = 1
    scripted = upstream(submit=SubmitOutcome(upstream_id="resp-1", result=_result()))
    sample = _sample()
    claim = _claim(sample)

    with answer_work():  # the worker's only turn, taken by another answer
        step, done = _in_thread(
            lambda: execution.run_step(sample_id=sample.pk, token=claim.token, worker="test")
        )
        step.join(HELD)
        assert scripted.calls == ["submit"]  # the upstream was asked and answered
        assert Sample.objects.get(pk=sample.pk).step == Step.SUBMIT  # nothing kept yet
    step.join(PROMPT)

    assert done == {"result": "answered"}
    assert Sample.objects.get(pk=sample.pk).step == Step.NONE
