"""python manage.py dispatcher [--interval S] [--run RUN_ID] [--once]"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
import uuid
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import DatabaseError, connection

from pipeline.dispatch import Dispatcher, DispatchReport, hold_leadership, relay_outbox
from sampling.models import Run

log = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Relay the outbox, recover expired leases and dispatch due samples, in a loop."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--interval", type=float, default=0.5, help="idle sleep, seconds")
        parser.add_argument(
            "--run", type=uuid.UUID, default=None, help="exit when this run finishes"
        )
        parser.add_argument("--once", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        dispatcher = Dispatcher(owner=f"dispatcher:{socket.gethostname()}:{os.getpid()}")
        started = -math.inf
        while True:
            if not hold_leadership():  # another dispatcher is active: stand by
                time.sleep(options["interval"])
                continue
            # Busy ticks follow each other no closer than this: the slots freed meanwhile are
            # claimed together, instead of one tick (about ten statements) per freed slot.
            time.sleep(
                max(0.0, settings.GEO_DISPATCH_MIN_TICK_SECONDS - (time.monotonic() - started))
            )
            started = time.monotonic()
            report = tick_or_wait(dispatcher, options["interval"])
            if report is None:
                continue
            if report.claimed or report.relayed or report.requeued:
                self.stdout.write(
                    f"claimed={report.claimed} relayed={report.relayed} requeued={report.requeued} "
                    + " ".join(f"{q}={n}" for q, n in sorted(report.published.items()))
                )
            if options["once"] or _run_finished(options["run"]):
                relay_outbox()  # the run's own end event, written by its last sample
                return
            if not report.claimed:
                time.sleep(options["interval"])


def tick_or_wait(dispatcher: Dispatcher, interval: float) -> DispatchReport | None:
    """One tick; a database error (a deadlock, a dropped connection) ends only this tick: it
    is logged, its transaction was rolled back, and the next tick starts after `interval`
    with a working connection. Everything a tick does is idempotent, so nothing is lost."""
    try:
        return dispatcher.tick()
    except DatabaseError:
        log.exception("dispatcher tick failed; retrying in %.1fs", interval)
        connection.close_if_unusable_or_obsolete()
        time.sleep(interval)
        return None


def _run_finished(run_id: uuid.UUID | None) -> bool:
    if run_id is None:
        return False
    return Run.objects.filter(pk=run_id).exclude(finished_at=None).exists()
