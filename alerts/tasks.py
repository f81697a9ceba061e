"""Thin Celery entry points: ids in, a service call, nothing else."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.conf import settings

from . import delivery, evaluation


@shared_task(name="alerts.evaluate_run")
def evaluate_run(run_id: str, outbox_id: int | None = None) -> None:
    evaluation.evaluate_run(run_id=run_id, outbox_id=outbox_id)


@shared_task(bind=True, name="alerts.deliver", max_retries=None)
def deliver(self: Any, delivery_id: int, outbox_id: int | None = None) -> None:
    delay = delivery.deliver(delivery_id=delivery_id, outbox_id=outbox_id)
    if delay is not None and self.request.retries < int(settings.GEO_ALERT_MAX_ATTEMPTS):
        raise self.retry(countdown=delay)
