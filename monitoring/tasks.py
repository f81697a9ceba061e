"""Thin Celery entry points: ids in, a service call, nothing else."""

from __future__ import annotations

from celery import shared_task

from . import services


@shared_task(name=services.WRITE_SERIES)
def write_series(run_id: str, outbox_id: int | None = None) -> int:
    return services.write_series(run_id=run_id, outbox_id=outbox_id)
