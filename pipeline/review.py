"""A person's decision on a sample parked because its acceptance could not be confirmed (a
direct model API cannot be asked whether it ran a request that timed out or crashed)."""

from __future__ import annotations

from django.db import transaction

from pipeline.runs import finish_run_if_done
from sampling.models import Sample
from sampling.transitions import NotResolvable, Resolution
from sampling.transitions import resolve_uncertain as resolve_sample

__all__ = ["NotResolvable", "Resolution", "resolve_uncertain"]


def resolve_uncertain(*, sample_id: int, resolution: Resolution, note: str = "") -> Sample:
    """Record the decision and move the sample on; a sample that ended its run ends the run."""
    with transaction.atomic():
        sample = resolve_sample(sample_id=sample_id, resolution=resolution, note=note)
        run_id = sample.run_id
        transaction.on_commit(lambda: finish_run_if_done(run_id=run_id))
    return sample
