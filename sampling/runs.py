"""Run lifecycle after launch: noticing the end, and what must follow it."""

from __future__ import annotations

import logging
from uuid import UUID

from django.db import transaction
from django.db.models.functions import Now

from geo_collect import metrics

from .models import QueueState, Run, Sample, Step, SubmissionState
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


def finish_ended_runs() -> int:
    """Safety net for the dispatcher: mark runs finished whose last sample ended while the
    process that ended it died before checking."""
    open_runs = Run.objects.filter(finished_at=None).exclude(
        samples__queue_state__in=[QueueState.READY, QueueState.LEASED, QueueState.PARKED]
    )
    return sum(
        finish_run_if_done(run_id=run_id) for run_id in open_runs.values_list("pk", flat=True)
    )


def on_run_finished(*, run_id: UUID | str) -> None:
    """What follows a run's end, delivered through the outbox (at least once, so idempotent):
    billing charges what completed and releases the rest of the hold."""
    from billing import hooks as billing_hooks

    from .selectors import run_status

    billing_hooks.settle_run(run_id=run_id)
    status = run_status(run_id=run_id)
    log.info("run finished run=%s outcome=%s %s", run_id, status.outcome, status.as_json())
    metrics.run_finished(outcome=status.outcome.value)


def cancel_run(*, run_id: UUID | str, reason: str = "cancelled by operator") -> int:
    """Stop a run locally. Samples the upstream never accepted (due, unclaimed, still
    `planned`) fail as cancelled and their share of the hold is released; work already
    accepted upstream or in a worker's hands finishes and is charged, since the upstream
    does it anyway. Returns how many samples were cancelled. Idempotent."""
    from billing import hooks as billing_hooks

    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.cancelled_at is None:
            Run.objects.filter(pk=run.pk).update(cancelled_at=Now())
        cancellable = Sample.objects.select_for_update(skip_locked=True).filter(
            run_id=run.pk,
            queue_state__in=[QueueState.READY, QueueState.PARKED],
            submission_state=SubmissionState.PLANNED,
        )
        cancelled = 0
        for sample in cancellable:
            sample.fail_collection()
            sample.failure_reason = reason[:200]
            cancelled += Sample.objects.filter(
                pk=sample.pk, fencing_token=sample.fencing_token, queue_state=sample.queue_state
            ).update(
                collection_state=sample.collection_state,
                failure_reason=sample.failure_reason,
                step=Step.NONE,
                queue_state=QueueState.DONE,
                updated_at=Now(),
            )
    billing_hooks.cancel_run(run_id=run.pk)
    finish_run_if_done(run_id=run.pk)
    return cancelled
