"""Reads. The one status aggregation service lives here: the admin, the API, commands and
exports all derive run and batch status from `run_status` / `batch_status`. Run and platform
status read the trigger-maintained counters (sampling/counters.py), batch status a grouped scan."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db.models import Count, Max, Q

from . import buckets, counters
from .counters import Counts
from .models import Batch, Run, Sample, UpstreamCancel


class Outcome(enum.StrEnum):
    IN_PROGRESS = "in_progress"
    ALL_SUCCEEDED = "all_succeeded"
    PARTIALLY_SUCCEEDED = "partially_succeeded"
    ALL_FAILED = "all_failed"
    # Finished because a cancel ended the samples not yet asked; what was collected before
    # stays (and is reported), so it is neither a failure nor a success of the run.
    CANCELLED = "cancelled"
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
    # Of `failed`, the samples a cancel ended before the upstream was asked
    # (buckets.CANCELLED). `failed` keeps them, as the counters do (pipeline/invariants.py
    # checks one against the other); what a person reads shows them as a bucket of their own:
    # `failed_not_cancelled` beside `cancelled`.
    cancelled: int = 0

    @property
    def failed_not_cancelled(self) -> int:
        return self.failed - self.cancelled

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
        if self.cancelled:
            return Outcome.CANCELLED
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
            "cancelled": self.cancelled,
            "failed_not_cancelled": self.failed_not_cancelled,
            "invalid": self.invalid,
            "review": self.review,
            "pending": self.pending,
            "uncertain": self.uncertain,
            "parked": self.parked,
            "layers": self.layers,
        }


def _from_counts(counts: Counts, planned: int, *, cancelled: int = 0) -> Status:
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
        cancelled=cancelled,
    )


def _cancelled_by(samples: Any, column: str) -> dict[Any, int]:
    """How many of `samples` a cancel ended, per value of `column` (one grouped query)."""
    rows = samples.filter(buckets.CANCELLED.q()).values_list(column).annotate(n=Count("id"))
    return dict(rows.order_by())


def _cancelled_in_run(run_id: UUID | str, column: str) -> dict[Any, int]:
    """Cancelled samples per `column` in a run that was cancelled; nothing to count (and no
    query over its samples) in a run that was not."""
    if not Run.objects.filter(pk=run_id, cancelled_at__isnull=False).exists():
        return {}
    return _cancelled_by(Sample.objects.filter(run_id=run_id), column)


def run_status(*, run_id: UUID | str) -> Status:
    """From the run's counters (sampling/counters.py): O(platforms) rows whatever the run's
    size. pipeline/invariants.py compares them with a scan."""
    planned = Run.objects.values_list("planned_samples", flat=True).get(pk=run_id)
    cancelled = sum(_cancelled_in_run(run_id, "run_id").values())
    return _from_counts(counters.run_counts(run_id=run_id), planned, cancelled=cancelled)


def last_sample_change(*, run_id: UUID | str) -> datetime | None:
    """When any sample of the run last changed: a supervisor's sign that work moves."""
    return Sample.objects.filter(run_id=run_id).aggregate(last=Max("updated_at"))["last"]


def batch_status(*, batch: Batch) -> Status:
    return batch_statuses(batches=[batch])[batch.pk]


def batch_statuses(*, batches: list[Batch]) -> dict[int, Status]:
    """Batches are small: one grouped scan of the given batches' samples, and one count of
    their cancelled samples."""
    batch_ids = [b.pk for b in batches]
    found = counters.scanned_by_batch(batch_ids=batch_ids)
    cancelled = _cancelled_by(Sample.objects.filter(batch_id__in=batch_ids), "batch_id")
    empty = Counts({})
    return {
        b.pk: _from_counts(found.get(str(b.pk), empty), b.size, cancelled=cancelled.get(b.pk, 0))
        for b in batches
    }


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
    cancelled = _cancelled_in_run(run_id, "platform")
    return {
        platform: _from_counts(counts, counts["samples"], cancelled=cancelled.get(platform, 0))
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


@dataclass(frozen=True)
class UpstreamCancels:
    """What a cancelled run asked its upstreams to stop (sampling.models.UpstreamCancel):
    `asked` tasks, `answered` of them, `acknowledged` as stopped, `failed` requests (no
    answer: an error). Asked and not answered: a request in flight, or a worker that died
    sending it (never asked again)."""

    asked: int = 0
    answered: int = 0
    acknowledged: int = 0
    failed: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"asked": self.asked, "answered": self.answered,
                "acknowledged": self.acknowledged, "failed": self.failed}  # fmt: skip


def upstream_cancels(*, run_id: UUID | str) -> UpstreamCancels:
    """The run's upstream cancels, counted (all zero for a run never cancelled)."""
    answered = Q(answered_at__isnull=False)
    counts = UpstreamCancel.objects.filter(run_id=run_id, requested_at__isnull=False).aggregate(
        asked=Count("id"),
        answered=Count("id", filter=answered),
        acknowledged=Count("id", filter=answered & Q(acknowledged=True)),
        failed=Count("id", filter=answered & ~Q(error="")),
    )
    return UpstreamCancels(**counts)
