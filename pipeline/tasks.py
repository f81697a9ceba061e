"""Thin Celery entry points: ids in, a service call, nothing else."""

from __future__ import annotations

import os
import socket

from celery import shared_task

from geo_collect.failpoints import failpoint

from . import execution, runs
from .recording import observe_batch, observe_step

_WORKER = f"{socket.gethostname()}:{os.getpid()}"


@shared_task(name="pipeline.execute_step")
def execute_step(sample_id: int, token: int) -> str:
    outcome = observe_step(execution.run_step, sample_id=sample_id, token=token, worker=_WORKER)
    failpoint("after_complete_before_ack")
    return outcome


@shared_task(name="pipeline.execute_submit_batch")
def execute_submit_batch(held: list[list[int]]) -> dict[int, str]:
    """Submit (sample id, token) pairs of one platform in one upstream call."""
    outcomes = observe_batch(
        execution.run_submit_batch,
        held=[(sample_id, token) for sample_id, token in held],
        worker=_WORKER,
    )
    failpoint("after_complete_before_ack")
    return outcomes


@shared_task(name="pipeline.run_finished")
def run_finished(run_id: str) -> None:
    runs.on_run_finished(run_id=run_id)
