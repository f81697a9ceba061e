"""Run lifecycle after launch: noticing the end, and what must follow it."""

from __future__ import annotations

import logging
from uuid import UUID

from django.db import transaction
from django.db.models.functions import Now

from .models import QueueState, Run, Sample
from .services import enqueue_outbox

log = logging.getLogger(__name__)


def finish_run_if_done(*, run_id: UUID) -> bool:
    """Mark the run finished once every planned sample is terminal; exactly once."""
    if Sample.objects.filter(run_id=run_id).exclude(queue_state=QueueState.DONE).exists():
        return False
    with transaction.atomic():
        updated = Run.objects.filter(pk=run_id, finished_at=None).update(finished_at=Now())
        if updated == 1:
            enqueue_outbox(
                task="sampling.run_finished",
                payload={"run_id": str(run_id)},
                dedupe_key=f"run-finished:{run_id}",
            )
    return updated == 1


def on_run_finished(*, run_id: UUID | str) -> None:
    """What follows a run's end, delivered through the outbox (at least once, so idempotent).
    Logs the final status from the aggregation service; billing releases its hold here."""
    from .selectors import run_status

    status = run_status(run_id=run_id)
    log.info("run finished run=%s outcome=%s %s", run_id, status.outcome, status.as_json())
