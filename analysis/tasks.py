"""Thin Celery entry points of the analysis queue: ids in, a service call."""

from __future__ import annotations

from celery import shared_task

from . import services


@shared_task(name=services.REANALYSE_TASK)
def reanalyse_batch(revision_id: int, sample_ids: list[int], outbox_id: int | None = None) -> int:
    return services.reanalyse_samples(
        revision_id=revision_id, sample_ids=sample_ids, outbox_id=outbox_id
    )
