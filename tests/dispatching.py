"""Waiting in tests, written once: `wait_until` looks at a condition until it holds,
`tick_until` runs the dispatcher's tick in the test process before each look (what
`manage.py dispatcher` does in its loop). Both return what the condition returned and fail the
test, saying what they waited for, when the time is up."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from pipeline.dispatch import DispatchReport, dispatch_once

T = TypeVar("T")

DISPATCHER = "test-dispatcher"  # the lease owner the in-test dispatcher claims as


def wait_until(
    condition: Callable[[], T],
    *,
    timeout: float = 30.0,
    pause: float = 0.1,
    tick: Callable[[], object] | None = None,
    describe: Callable[[], str] | None = None,
) -> T:
    """Until `condition()` returns something true, which is returned. `tick()`, if given, runs
    before each look; no pause follows a tick that returned a `DispatchReport` with claims
    (more work is likely due at once). After `timeout` seconds an AssertionError names the
    condition and, if given, `describe()`."""
    deadline = time.monotonic() + timeout
    while True:
        report = tick() if tick is not None else None
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            what = getattr(condition, "__qualname__", repr(condition))
            detail = f": {describe()}" if describe is not None else ""
            raise AssertionError(f"{what} did not hold within {timeout:.0f}s{detail}")
        if not (isinstance(report, DispatchReport) and report.claimed):
            time.sleep(pause)


def tick_until(
    condition: Callable[[], T],
    *,
    timeout: float = 60.0,
    pause: float = 0.2,
    owner: str = DISPATCHER,
    on_tick: Callable[[], None] | None = None,
    describe: Callable[[], str] | None = None,
) -> T:
    """The dispatcher's loop in the test process until `condition()` holds: one tick
    (`dispatch_once`: outbox relay, lease sweep, claims and publishes, bookkeeping), then
    `on_tick()` if given, then the condition."""

    def tick() -> DispatchReport:
        report = dispatch_once(owner=owner)
        if on_tick is not None:
            on_tick()
        return report

    return wait_until(condition, timeout=timeout, pause=pause, tick=tick, describe=describe)
