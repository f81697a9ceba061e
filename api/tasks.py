"""Thin Celery entry points: ids in, a service call, nothing else."""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.conf import settings

from . import webhooks


@shared_task(bind=True, name="api.deliver_webhook", max_retries=None)
def deliver_webhook(self: Any, delivery_id: int, outbox_id: int | None = None) -> None:
    delay = webhooks.deliver(delivery_id=delivery_id, outbox_id=outbox_id)
    if delay is not None and self.request.retries < int(settings.GEO_WEBHOOK_MAX_ATTEMPTS):
        raise self.retry(countdown=delay)
