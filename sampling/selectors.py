"""Reads. The one status aggregation service lives here: the admin, the API, commands and
exports all derive run and batch status from `run_status` / `batch_status`. Run and platform
status read the trigger-maintained counters (sampling/counters.py), batch status a grouped scan."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db.models import Count, Max

from . import counters
from .counters import Counts
from .models import Batch, Run, Sample


class Outcome(enum.StrEnum):
    IN_PROGRESS = "in_progress"
    ALL_SUCCEEDED = "all_succeeded"
    PARTIALLY_SUCCEEDED = "partially_succeeded"
    ALL_FAILED = "all_failed"
    EMPTY = "empty"


@dataclass
class Status:
    """A run's (or batch's, or platform's) samples per outcome bucket (sampling/buckets.py).
    `pending` is every sample not yet terminal."""

    planned: int
    succeeded: int
    failed: int
    invalid: int
    review: int
    pending: int
    uncertain: int
    parked: int
    layers: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def terminal(self) -> int:
        return self.planned - self.pending

    @property
    def finished(self) -> bool:
        return self.planned > 0 and self.pending == 0

    @property
    def outcome(self) -> Outcome:
        if self.planned == 0:
            return Outcome.EMPTY
        if not self.finished:
            return Outcome.IN_PROGRESS
        if self.succeeded == self.planned:
            return Outcome.ALL_SUCCEEDED
        if self.succeeded == 0 and self.review == 0:
            return Outcome.ALL_FAILED
        return Outcome.PARTIALLY_SUCCEEDED

    def as_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "finished": self.finished,
            "planned": self.planned,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "invalid": self.invalid,
            "review": self.review,
            "pending": self.pending,
            "uncertain": self.uncertain,
            "parked": self.parked,
            "layers": self.layers,
        }


def _from_counts(counts: Counts, planned: int) -> Status:
    return Status(
        planned=planned,
        succeeded=counts["succeeded"],
        failed=counts["failed"],
        invalid=counts["invalid"],
        review=counts["review"],
        pending=planned - counts["terminal"],
        uncertain=counts["sub_uncertain"],
        parked=counts["parked"],
        layers=counts.layers(),
    )


def run_status(*, run_id: UUID | str) -> Status:
    """From the run's counters (sampling/counters.py): O(platforms) rows whatever the run's
    size. pipeline/invariants.py compares them with a scan."""
    planned = Run.objects.values_list("planned_samples", flat=True).get(pk=run_id)
    return _from_counts(counters.run_counts(run_id=run_id), planned)


def last_sample_change(*, run_id: UUID | str) -> datetime | None:
    """When any sample of the run last changed: a supervisor's sign that work moves."""
    return Sample.objects.filter(run_id=run_id).aggregate(last=Max("updated_at"))["last"]


def batch_status(*, batch: Batch) -> Status:
    return batch_statuses(batches=[batch])[batch.pk]


def batch_statuses(*, batches: list[Batch]) -> dict[int, Status]:
    """Batches are small: one grouped scan of the given batches' samples (one query)."""
    found = counters.scanned_by_batch(batch_ids=[b.pk for b in batches])
    empty = Counts({})
    return {b.pk: _from_counts(found.get(str(b.pk), empty), b.size) for b in batches}


def run_outcomes(*, run_ids: list[UUID]) -> dict[UUID, Status]:
    """Many runs' statuses in two queries (the run list)."""
    planned = dict(Run.objects.filter(pk__in=run_ids).values_list("pk", "planned_samples"))
    found = counters.counts_by_run(run_ids=run_ids)
    empty = Counts({})
    return {
        run_id: _from_counts(found.get(run_id, empty), planned.get(run_id, 0)) for run_id in run_ids
    }


def platform_statuses(*, run_id: UUID | str) -> dict[str, Status]:
    """The run's status per platform (planned = the platform's samples), for the run page."""
    return {
        platform: _from_counts(counts, counts["samples"])
        for platform, counts in counters.counts_by_platform(run_id=run_id).items()
    }


def failure_reasons(*, run_id: UUID | str) -> list[tuple[str, int]]:
    """Why the run's failed samples failed, most frequent first."""
    rows = (
        Sample.objects.filter(run_id=run_id, collection_state="failed")
        .values_list("failure_reason")
        .annotate(n=Count("id"))
        .order_by("-n", "failure_reason")
    )
    return list(rows)
