"""A person's decision on a sample parked because its acceptance could not be confirmed (a
direct model API cannot be asked whether it ran a request that timed out or crashed)."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from pipeline.runs import finish_run_if_done
from sampling.models import QueueState, Sample, SubmissionState
from sampling.transitions import NotResolvable, Resolution
from sampling.transitions import resolve_uncertain as resolve_sample

__all__ = ["NotResolvable", "Resolution", "abandon_parked_uncertain", "resolve_uncertain"]


def resolve_uncertain(*, sample_id: int, resolution: Resolution, note: str = "") -> Sample:
    """Record the decision and move the sample on; a sample that ended its run ends the run."""
    with transaction.atomic():
        sample = resolve_sample(sample_id=sample_id, resolution=resolution, note=note)
        run_id = sample.run_id
        transaction.on_commit(lambda: finish_run_if_done(run_id=run_id))
    return sample


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
