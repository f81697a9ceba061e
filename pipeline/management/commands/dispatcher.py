"""python manage.py dispatcher [--interval S] [--run RUN_ID] [--once]"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import DatabaseError

from geo_collect.db_outage import (
    Outage,
    answers,
    process_outage,
    reset_connection,
    wait_for_database,
)
from pipeline.dispatch import Dispatcher, DispatchReport, relay_outbox
from pipeline.leadership import Leadership
from sampling.models import Run

log = logging.getLogger(__name__)

T = TypeVar("T")


class Command(BaseCommand):
    help = "Relay the outbox, recover expired leases and dispatch due samples, in a loop."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--interval", type=float, default=0.5, help="idle sleep, seconds")
        parser.add_argument(
            "--run", type=uuid.UUID, default=None, help="exit when this run finishes"
        )
        parser.add_argument("--once", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        owner = f"dispatcher:{socket.gethostname()}:{os.getpid()}"
        dispatcher = Dispatcher(owner=owner, leadership=Leadership(holder=owner))
        outage = process_outage("dispatcher")
        try:
            self._loop(dispatcher, outage, options)
        finally:  # a clean exit hands the lease over (a killed one: its session ends with it)
            with contextlib.suppress(DatabaseError):
                assert dispatcher.leadership is not None
                dispatcher.leadership.release()

    def _loop(self, dispatcher: Dispatcher, outage: Outage, options: dict[str, Any]) -> None:
        started = -math.inf
        while True:
            # Busy ticks follow each other no closer than this: the slots freed meanwhile are
            # claimed together, instead of one tick (about ten statements) per freed slot.
            time.sleep(
                max(0.0, settings.GEO_DISPATCH_MIN_TICK_SECONDS - (time.monotonic() - started))
            )
            started = time.monotonic()
            report = tick_or_wait(dispatcher, options["interval"], outage)
            if report is None:
                continue
            if not report.leading:  # another dispatcher is active: stand by
                time.sleep(options["interval"])
                continue
            if report.claimed or report.relayed or report.requeued:
                self.stdout.write(
                    f"claimed={report.claimed} relayed={report.relayed} requeued={report.requeued} "
                    + " ".join(f"{q}={n}" for q, n in sorted(report.published.items()))
                )
            if guarded(lambda: _done(dispatcher, options), outage, options["interval"]):
                return
            if not report.claimed:
                time.sleep(options["interval"])


def tick_or_wait(
    dispatcher: Dispatcher, interval: float, outage: Outage | None = None
) -> DispatchReport | None:
    """One tick (leadership first, then relay, sweeper, schedules, admission and claims). A
    database error ends only this tick: everything a tick does is idempotent, so nothing is
    lost. None: the tick failed and the next one may start."""
    return guarded(dispatcher.tick, outage or Outage("dispatcher"), interval)


def guarded(work: Callable[[], T], outage: Outage, interval: float) -> T | None:
    """`work()`, or None after a database error, with the connection made good again: an error
    the database answers right after (a deadlock) is logged with its traceback and followed by
    `interval` of rest; an outage (the database gone: restarting, down, cut off) is logged
    once when it starts and once when it ends, waited out with a capped backoff, and never
    ends the process."""
    try:
        return work()
    except DatabaseError as error:
        reset_connection()  # the next statement opens a fresh connection
        if outage.active or not answers():
            wait_for_database(outage, error)
            return None
        log.exception("dispatcher tick failed; retrying in %.1fs", interval)
        time.sleep(interval)
        return None


def _done(dispatcher: Dispatcher, options: dict[str, Any]) -> bool:
    if not (options["once"] or _run_finished(options["run"])):
        return False
    relay_outbox(fence=dispatcher.fence())  # the run's own end event, written by its last sample
    return True


def _run_finished(run_id: uuid.UUID | None) -> bool:
    if run_id is None:
        return False
    return Run.objects.filter(pk=run_id).exclude(finished_at=None).exists()
