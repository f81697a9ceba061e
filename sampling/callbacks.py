"""Provider callbacks: signed, possibly repeated hints that a task changed state."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models.functions import Now

from . import inputs
from .models import CallbackDelivery, QueueState, Sample, Step


@dataclass(frozen=True)
class CallbackOutcome:
    duplicate: bool
    samples_woken: int


def accept_callback(*, provider: str, delivery_id: str, task_id: str) -> CallbackOutcome:
    """Record the delivery once and make the task's sample poll now. A repeated delivery
    changes nothing; an unknown task is recorded and ignored. Ids that break the input rules
    raise InputError before anything is written."""
    delivery_id = inputs.identifier(delivery_id, "delivery_id")
    task_id = inputs.identifier(task_id, "task_id")
    try:
        with transaction.atomic():
            CallbackDelivery.objects.create(
                provider=provider, delivery_id=delivery_id, task_id=task_id
            )
            woken = Sample.objects.filter(
                platform=provider,
                upstream_id=task_id,
                step=Step.POLL,
                queue_state=QueueState.READY,
            ).update(due_at=Now())
    except IntegrityError:
        return CallbackOutcome(duplicate=True, samples_woken=0)
    return CallbackOutcome(duplicate=False, samples_woken=woken)
