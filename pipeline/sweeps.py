"""Periodic sweeps that upper layers register, run by the dispatcher's bookkeeping tick
(pipeline/dispatch.py), as the run-end followers are (pipeline/runs.py): pipeline does not
import the layers above it, so they say what to sweep from their AppConfig.ready.

A sweep is a bounded, idempotent repair (e.g. the API's webhook deliveries whose broker
message was lost). One that fails is logged and does not stop the others or the tick.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

Sweep = Callable[[], int]

_sweeps: dict[str, Sweep] = {}


def register_sweep(*, name: str, sweep: Sweep) -> None:
    """By name: a second registration under the same name replaces the first."""
    _sweeps[name] = sweep


def registered_sweeps() -> dict[str, Sweep]:
    return dict(_sweeps)


def run_sweeps() -> dict[str, int]:
    """Every registered sweep once; what each repaired (-1: it failed, see the log)."""
    done: dict[str, int] = {}
    for name, sweep in _sweeps.items():
        try:
            done[name] = sweep()
        except Exception:  # one broken sweep must not stop the dispatcher's tick
            log.exception("sweep %s failed", name)
            done[name] = -1
    return done
