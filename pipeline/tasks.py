"""Thin Celery entry points: ids in, a service call, nothing else. A step rides out a database
restart or outage (geo_collect/db_outage.py): it waits for the database, for up to its lease,
and runs again under its token, as a redelivered message would."""

from __future__ import annotations

import os
import socket

from celery import shared_task
from django.conf import settings

from geo_collect.db_outage import process_outage, ride_out
from geo_collect.failpoints import failpoint

from . import execution, runs, upstream_cancel
from .recording import observe_batch, observe_step
from .runs import CANCEL_UPSTREAM

_WORKER = f"{socket.gethostname()}:{os.getpid()}"


def _one_step(sample_id: int, token: int) -> str:
    return ride_out(
        lambda: observe_step(execution.run_step, sample_id=sample_id, token=token, worker=_WORKER),
        outage=process_outage("worker"),  # one per process, shared by its threads
        within_seconds=settings.GEO_LEASE_SECONDS,
    )


@shared_task(name="pipeline.execute_step")
def execute_step(sample_id: int, token: int) -> str:
    outcome = _one_step(sample_id, token)
    failpoint("after_complete_before_ack")
    return outcome


@shared_task(name="pipeline.execute_steps")
def execute_steps(held: list[list[int]]) -> dict[int, str]:
    """(sample id, token) pairs of one queue, each its own step, run at the same time."""
    outcomes = execution.run_steps_together(
        [(sample_id, token) for sample_id, token in held], _one_step
    )
    failpoint("after_complete_before_ack")
    return outcomes


@shared_task(name="pipeline.execute_submit_batch")
def execute_submit_batch(held: list[list[int]]) -> dict[int, str]:
    """Submit (sample id, token) pairs of one platform in one upstream call."""
    outcomes = ride_out(
        lambda: observe_batch(
            execution.run_submit_batch,
            held=[(sample_id, token) for sample_id, token in held],
            worker=_WORKER,
        ),
        outage=process_outage("worker"),  # one per process, shared by its threads
        within_seconds=settings.GEO_LEASE_SECONDS,
    )
    failpoint("after_complete_before_ack")
    return outcomes


@shared_task(name="pipeline.run_finished")
def run_finished(run_id: str, outbox_id: int | None = None) -> None:
    runs.on_run_finished(run_id=run_id, outbox_id=outbox_id)


@shared_task(name=CANCEL_UPSTREAM)
def cancel_upstream(run_id: str, platform: str, outbox_id: int | None = None) -> int:
    """On the platform's queue (the outbox row names it): its upstream calls go where that
    platform's workers and egress are."""
    return upstream_cancel.cancel_accepted_tasks(
        run_id=run_id, platform=platform, outbox_id=outbox_id
    )
