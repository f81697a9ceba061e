"""Periodic sweeps that upper layers register, run by the dispatcher's bookkeeping tick
(pipeline/dispatch.py), as the run-end followers are (pipeline/runs.py): pipeline does not
import the layers above it, so they say what to sweep from their AppConfig.ready.

A sweep is a bounded, idempotent repair (e.g. the API's webhook deliveries whose broker
message was lost). One that fails is logged and does not stop the others or the tick.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

Sweep = Callable[[], int]
Every = Callable[[], float]  # seconds between two runs of a sweep, read at each tick

_sweeps: dict[str, Sweep] = {}
_every: dict[str, Every] = {}
_last: dict[str, float] = {}  # monotonic time of each sweep's last run in this process


def register_sweep(*, name: str, sweep: Sweep, every: Every | None = None) -> None:
    """By name: a second registration under the same name replaces the first. `every`: run
    at most this often (a sweep whose query grows with history), else at every tick."""
    _sweeps[name] = sweep
    if every is None:
        _every.pop(name, None)
    else:
        _every[name] = every


def registered_sweeps() -> dict[str, Sweep]:
    return dict(_sweeps)


def run_sweeps() -> dict[str, int]:
    """Every registered sweep once, unless it ran less than its `every` ago; what each
    repaired (-1: it failed, see the log; a sweep not due is left out)."""
    done: dict[str, int] = {}
    for name, sweep in _sweeps.items():
        every = _every.get(name)
        now = time.monotonic()
        if every is not None and now - _last.get(name, -math.inf) < every():
            continue
        _last[name] = now
        try:
            done[name] = sweep()
        except Exception:  # one broken sweep must not stop the dispatcher's tick
            log.exception("sweep %s failed", name)
            done[name] = -1
    return done
