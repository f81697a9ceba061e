"""Named crash points for fault-injection tests (docs/architecture.md).

Off unless `GEO_FAILPOINTS` is set in the environment; the demo and production never set it.
`GEO_FAILPOINTS=after_accept_before_record` kills the process with SIGKILL the first time
that point is reached; `name:3` kills on the third time; several points are comma separated.
A point in `RAISING` does not kill: it raises the error it names there once, as the failure it
stands for would (a database refusing a write).
With `GEO_FAILPOINT_DIR` set, a point fires once per directory across all processes (a marker
file is created atomically), so a restarted worker does not die again at the same place.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

from django.db import OperationalError

log = logging.getLogger(__name__)

POINTS = frozenset(
    {
        "after_commit_before_publish",  # claim or outbox row committed, message not published
        "after_accept_before_record",  # upstream accepted, acceptance not yet recorded
        "after_store_before_complete",  # evidence objects stored, sample not yet completed
        "after_complete_before_ack",  # step committed, broker message not acknowledged
        "after_inbox_before_archive",  # answer kept in the inbox, not yet archived
        "inbox_write_fails",  # raises: the database fails the write that keeps an answer
    }
)
# Points that raise instead of killing: name -> the failure they stand for.
RAISING: dict[str, Callable[[str], Exception]] = {
    "inbox_write_fails": lambda name: OperationalError(f"failpoint {name}: database failure"),
}

_hits: dict[str, int] = {}
_lock = threading.Lock()


def _armed() -> dict[str, int]:
    armed: dict[str, int] = {}
    for item in filter(None, (p.strip() for p in os.environ.get("GEO_FAILPOINTS", "").split(","))):
        name, _, nth = item.partition(":")
        if name not in POINTS:
            raise ValueError(f"unknown failpoint {name!r} (known: {', '.join(sorted(POINTS))})")
        armed[name] = int(nth or 1)
    return armed


def failpoint(name: str) -> None:
    """Die here, abruptly, if this point is armed. Costs one dict lookup when nothing is."""
    if not os.environ.get("GEO_FAILPOINTS"):
        return
    nth = _armed().get(name)
    if nth is None:
        return
    with _lock:
        _hits[name] = _hits.get(name, 0) + 1
        if _hits[name] != nth or not _claim_once(name):
            return
    if name in RAISING:
        log.error("failpoint %s: raising in pid %s", name, os.getpid())
        raise RAISING[name](name)
    log.error("failpoint %s: killing pid %s", name, os.getpid())
    os.kill(os.getpid(), signal.SIGKILL)


def _claim_once(name: str) -> bool:
    directory = os.environ.get("GEO_FAILPOINT_DIR")
    if not directory:
        return True
    try:
        (Path(directory) / f"{name}.fired").open("x").close()
    except FileExistsError:
        return False
    return True
