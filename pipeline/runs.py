"""Run lifecycle after launch: noticing the end, and what must follow it."""

from __future__ import annotations

import logging
from uuid import UUID

from django.db import transaction
from django.db.models.functions import Now
from django.dispatch import Signal

from billing import services as billing
from billing.costs import book_run_attempt_costs
from geo_collect import metrics
from sampling import counters
from sampling.locking import Level, lock_run, locked
from sampling.models import QueueState, Run, Sample, SubmissionState
from sampling.selectors import run_status
from sampling.services import enqueue_outbox
from sampling.transitions import cancel_unaccepted

log = logging.getLogger(__name__)

# Sent by `on_run_finished` (at least once per finish; receivers are idempotent) with
# `run_id` and `status` (sampling.selectors.Status). Upper layers (api/webhooks.py) listen.
run_ended = Signal()


def finish_run_if_done(*, run_id: UUID) -> bool:
    """Mark the run finished once every planned sample is terminal; exactly once. Charges
    still queued are posted first: a finished run's billing is final."""
    if counters.open_samples(run_id=run_id):  # after every sample's last step: O(platforms)
        return False
    billing.post_pending_captures(run_id=run_id)
    with transaction.atomic():
        updated = Run.objects.filter(pk=run_id, finished_at=None).update(finished_at=Now())
        if updated == 1:
            # Each finish after a resume (pipeline/resume.py) settles what that round held.
            resumes = Run.objects.values_list("resumes", flat=True).get(pk=run_id)
            enqueue_outbox(
                task="pipeline.run_finished",
                payload={"run_id": str(run_id)},
                dedupe_key=f"run-finished:{run_id}" + (f":{resumes}" if resumes else ""),
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
    billing.settle_run(run_id=run_id)
    book_run_attempt_costs(run_id=run_id)
    status = run_status(run_id=run_id)
    log.info("run finished run=%s outcome=%s %s", run_id, status.outcome, status.as_dict())
    metrics.run_finished(outcome=status.outcome.value)
    run_ended.send(sender=Run, run_id=str(run_id), status=status)


def cancel_run(*, run_id: UUID | str, reason: str = "cancelled by operator") -> int:
    """Stop a run locally. Samples the upstream never accepted (due, unclaimed, still
    `planned`) fail as cancelled and their share of the hold is released; work already
    accepted upstream or in a worker's hands finishes and is charged, since the upstream
    does it anyway. Returns how many samples were cancelled. Idempotent."""
    with transaction.atomic():
        run = lock_run(run_id)
        if run.cancelled_at is None:
            Run.objects.filter(pk=run.pk).update(cancelled_at=Now())
        cancellable = locked(
            Sample.objects.filter(
                run_id=run.pk,
                queue_state__in=[QueueState.READY, QueueState.PARKED],
                submission_state=SubmissionState.PLANNED,
            ),
            level=Level.SAMPLE,
            skip_locked=True,
        )
        cancelled = sum(cancel_unaccepted(sample, reason=reason) for sample in cancellable)
    billing.release_unaccepted_hold(run_id=run.pk)
    finish_run_if_done(run_id=run.pk)
    return cancelled
