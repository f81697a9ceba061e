"""Riding out a database that went away (a restart, an outage): the broken connection is closed
(with a pool, the pooled connections that broke with it are dropped too), the process waits
with a capped exponential backoff until the database answers again, logs once when the outage
starts and once when it ends with its duration, and carries on. Nothing here exits.

The dispatcher's loop and the workers' task entry (pipeline/tasks.py) use it; what they do
between two attempts is idempotent by design (a tick; a step under its fencing token, which
is what a redelivered message does anyway).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import psycopg
from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, connection

from . import metrics

log = logging.getLogger(__name__)

T = TypeVar("T")

AGAIN_AT_ONCE = 2
PROBE_TIMEOUT_SECONDS = 2.0

# What a lost or refused connection raises (Django wraps psycopg's and sqlite3's errors).
CONNECTION_ERRORS: tuple[type[Exception], ...] = (OperationalError, InterfaceError)
# A probe through the pool meets psycopg's own errors (a pool timeout), unwrapped by Django.
_PROBE_ERRORS: tuple[type[Exception], ...] = (
    *CONNECTION_ERRORS,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)


class Outage:
    """One per process: whether the database is known to be unreachable, since when."""

    def __init__(self, process: str) -> None:
        self.process = process
        self._lock = threading.Lock()
        self._since: float | None = None

    @property
    def active(self) -> bool:
        return self._since is not None

    def began(self, error: BaseException) -> None:
        with self._lock:
            if self._since is not None:
                return
            self._since = time.monotonic()
        log.error(
            "database unreachable (%s): %s: %s; retrying with backoff up to %.0fs",
            self.process,
            type(error).__name__,
            str(error).strip()[:300],
            settings.GEO_DB_RETRY_MAX_SECONDS,
        )
        metrics.database_outage(process=self.process)

    def ended(self) -> None:
        with self._lock:
            since, self._since = self._since, None
        if since is not None:
            log.warning(
                "database reachable again (%s) after %.1fs", self.process, time.monotonic() - since
            )


_process_outage: Outage | None = None


def process_outage(process: str) -> Outage:
    """This process's outage record (one per process, named by its first caller)."""
    global _process_outage
    if _process_outage is None:
        _process_outage = Outage(process)
    return _process_outage


class PoolErrorsAsOutage(logging.Filter):
    """On psycopg_pool's logger (settings.LOGGING): a worker's step waits in the pool while the
    database is down, and the pool logs every failed reconnection. The first one starts the
    process's outage (logged once); the rest are dropped; the next step that succeeds ends it
    (`ride_out`, logged with its duration)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        if _process_outage is not None and "error connecting" in record.getMessage():
            _process_outage.began(ConnectionError(record.getMessage()))
        return False


def reset_connection() -> None:
    """Close this thread's connection, which may be broken; with a pool, also drop the idle
    pooled connections that broke with it (psycopg_pool checks each one)."""
    with contextlib.suppress(DatabaseError):  # closing a dead connection can fail: it is gone
        connection.close()
    pool = getattr(connection, "pool", None)
    if pool is not None:
        try:
            pool.check()
        except Exception as error:  # a pool that cannot reach the server: it reconnects later
            log.debug("pool check failed: %s", error)


def answers() -> bool:
    """Whether the database answers now, on a fresh connection if need be. With a pool the
    probe takes a pooled connection of its own and waits for one at most
    PROBE_TIMEOUT_SECONDS: the pool's own wait (GEO_WORKER_DB_POOL_TIMEOUT) would hide the
    outage behind a minute of blocking."""
    pool = getattr(connection, "pool", None)
    try:
        if pool is not None and not connection.in_atomic_block:
            with pool.connection(timeout=PROBE_TIMEOUT_SECONDS) as pooled:
                pooled.execute("SELECT 1")
            return True
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return True
    except _PROBE_ERRORS:
        reset_connection()
        return False


def wait_for_database(
    outage: Outage,
    error: BaseException,
    *,
    deadline: float = float("inf"),
    sleep: Callable[[float], None] = time.sleep,
) -> int | None:
    """After `error`: back off until the database answers, and return how many probes failed
    first (0: it answered at once, the error was not an outage), or None when `deadline`
    (monotonic) would pass first. Logs the outage's start and end, once each."""
    reset_connection()
    delay = settings.GEO_DB_RETRY_MIN_SECONDS
    failed = 0
    while not answers():
        failed += 1
        outage.began(error)
        if time.monotonic() + delay > deadline:
            return None
        sleep(delay)
        delay = min(delay * 2, settings.GEO_DB_RETRY_MAX_SECONDS)
    outage.ended()
    return failed


def ride_out(work: Callable[[], T], *, outage: Outage, within_seconds: float) -> T:
    """`work()`, done again once the database answers after it failed on a lost connection,
    for up to `within_seconds`; after that the error is raised. Only for work that may be done
    again (a step under its fencing token is: a redelivered message does exactly that). An
    error the database answers right after (a deadlock) is given `AGAIN_AT_ONCE` more tries."""
    deadline = time.monotonic() + within_seconds
    at_once = 0
    while True:
        try:
            result = work()
        except CONNECTION_ERRORS as error:
            if connection.in_atomic_block:
                raise
            failed = wait_for_database(outage, error, deadline=deadline)
            at_once = at_once + 1 if failed == 0 else 0
            if failed is None or at_once > AGAIN_AT_ONCE:
                raise
            log.info("database error in %s, doing the work again: %s", outage.process, error)
            continue
        if outage.active:  # an outage another thread gave up on ends with this success
            outage.ended()
        return result
