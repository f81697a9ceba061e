"""Thin Celery entry points: ids in, a service call, nothing else."""

from __future__ import annotations

import os
import socket

from celery import shared_task

from geo_collect.failpoints import failpoint
from ops.recording import observe_step

from . import execution, runs

_WORKER = f"{socket.gethostname()}:{os.getpid()}"


@shared_task(name="sampling.execute_step")
def execute_step(sample_id: int, token: int) -> str:
    outcome = observe_step(execution.run_step, sample_id=sample_id, token=token, worker=_WORKER)
    failpoint("after_complete_before_ack")
    return outcome


@shared_task(name="sampling.run_finished")
def run_finished(run_id: str) -> None:
    runs.on_run_finished(run_id=run_id)
