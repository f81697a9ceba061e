"""A person's decision on a sample parked because its acceptance could not be confirmed (a
direct model API cannot be asked whether it ran a request that timed out or crashed)."""

from __future__ import annotations

import enum
from typing import Any

from django.db import transaction
from django.db.models.functions import Now

from .models import Attempt, AttemptStatus, QueueState, Sample, Step, SubmissionState


class Resolution(enum.StrEnum):
    NOT_EXECUTED = "not_executed"  # established the upstream did not run it: ask again
    ABANDON = "abandon"  # keep it as a failed placeholder; it stays in every denominator


class NotResolvable(ValueError):
    pass


def resolve_uncertain(*, sample_id: int, resolution: Resolution, note: str = "") -> Sample:
    """Record the decision on the open attempt and move the sample on. Only a parked,
    uncertain sample can be resolved; anything else raises NotResolvable, naming its state."""
    from .runs import finish_run_if_done

    with transaction.atomic():
        sample = Sample.objects.select_for_update().get(pk=sample_id)
        if not (
            sample.queue_state == QueueState.PARKED
            and sample.submission_state == SubmissionState.UNCERTAIN
        ):
            raise NotResolvable(
                f"sample {sample_id} is {sample.submission_state}/{sample.queue_state}, "
                "not parked as uncertain"
            )
        reason = f"reviewed: {resolution.value}" + (f" ({note})" if note else "")
        _close_open_attempt(sample, reason)
        if resolution is Resolution.NOT_EXECUTED:
            sample.confirm_not_accepted()
            sample.step, sample.queue_state = Step.SUBMIT, QueueState.READY
        else:
            sample.fail_collection()
            sample.step, sample.queue_state = Step.NONE, QueueState.DONE
        sample.failure_reason = reason[:200]
        updated = Sample.objects.filter(
            pk=sample.pk, fencing_token=sample.fencing_token, queue_state=QueueState.PARKED
        ).update(
            submission_state=sample.submission_state,
            collection_state=sample.collection_state,
            step=sample.step,
            queue_state=sample.queue_state,
            failure_reason=sample.failure_reason,
            claims=0,
            due_at=Now(),
            updated_at=Now(),
        )
        if updated != 1:
            raise NotResolvable(f"sample {sample_id} changed while being resolved")
        run_id = sample.run_id
        transaction.on_commit(lambda: finish_run_if_done(run_id=run_id))
    return sample


def _close_open_attempt(sample: Sample, reason: str) -> None:
    Attempt.objects.filter(
        sample=sample, status__in=[AttemptStatus.STARTED, AttemptStatus.UNKNOWN]
    ).update(status=AttemptStatus.FAILED, error_message=reason[:2000], finished_at=Now())


def abandon_parked_uncertain(*, run_ids: list[Any], note: str) -> list[int]:
    """A harness acting as the reviewer (the demo, the chaos run): every parked uncertain
    sample of these runs is kept as a failed placeholder. Returns their ids."""
    parked = list(
        Sample.objects.filter(
            run_id__in=run_ids,
            queue_state=QueueState.PARKED,
            submission_state=SubmissionState.UNCERTAIN,
        ).values_list("pk", flat=True)
    )
    for sample_id in parked:
        resolve_uncertain(sample_id=sample_id, resolution=Resolution.ABANDON, note=note)
    return parked
