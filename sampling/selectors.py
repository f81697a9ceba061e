"""Reads. The one status aggregation service lives here: the admin, the API, commands and
exports all derive run and batch status from `run_status` / `batch_status`."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db.models import Count, Max, Q, QuerySet

from .models import AnalysisState, Batch, CollectionState, QueueState, Run, Sample

LAYERS = ("submission_state", "collection_state", "evidence_state", "analysis_state")


class Outcome(enum.StrEnum):
    IN_PROGRESS = "in_progress"
    ALL_SUCCEEDED = "all_succeeded"
    PARTIALLY_SUCCEEDED = "partially_succeeded"
    ALL_FAILED = "all_failed"
    EMPTY = "empty"


# A sample's place in every report, derived from its layers. "review" is terminal for the
# run (a person decides next) but is not yet counted as succeeded.
SUCCEEDED = Q(
    collection_state=CollectionState.COMPLETED,
    analysis_state=AnalysisState.ACCEPTED,
    validity="valid",
)
INVALID = Q(collection_state=CollectionState.COMPLETED, validity="invalid")
REVIEW = (
    Q(collection_state=CollectionState.COMPLETED, analysis_state=AnalysisState.REVIEW) & ~INVALID
)
FAILED = Q(collection_state=CollectionState.FAILED) | (
    Q(collection_state=CollectionState.COMPLETED, analysis_state=AnalysisState.FAILED) & ~INVALID
)
TERMINAL = Q(queue_state=QueueState.DONE)


@dataclass
class Status:
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


def _status(samples: QuerySet[Sample], planned: int) -> Status:
    totals = samples.aggregate(
        succeeded=Count("id", filter=SUCCEEDED),
        failed=Count("id", filter=FAILED & TERMINAL),
        invalid=Count("id", filter=INVALID & TERMINAL),
        review=Count("id", filter=REVIEW & TERMINAL),
        terminal=Count("id", filter=TERMINAL),
        uncertain=Count("id", filter=Q(submission_state="uncertain")),
        parked=Count("id", filter=Q(queue_state=QueueState.PARKED)),
    )
    layers: dict[str, dict[str, int]] = {}
    for layer in LAYERS:
        rows = samples.values_list(layer).annotate(n=Count("id")).order_by(layer)
        layers[layer.removesuffix("_state")] = {state: n for state, n in rows}
    return Status(
        planned=planned,
        succeeded=totals["succeeded"],
        failed=totals["failed"],
        invalid=totals["invalid"],
        review=totals["review"],
        pending=planned - totals["terminal"],
        uncertain=totals["uncertain"],
        parked=totals["parked"],
        layers=layers,
    )


def run_status(*, run_id: UUID | str) -> Status:
    run = Run.objects.get(pk=run_id)
    return _status(Sample.objects.filter(run_id=run.pk), run.planned_samples)


def last_sample_change(*, run_id: UUID | str) -> datetime | None:
    """When any sample of the run last changed: a supervisor's sign that work moves."""
    return Sample.objects.filter(run_id=run_id).aggregate(last=Max("updated_at"))["last"]


def batch_status(*, batch: Batch) -> Status:
    return _status(Sample.objects.filter(batch_id=batch.pk), batch.size)


def run_outcomes(*, run_ids: list[UUID]) -> dict[UUID, Status]:
    return {run_id: run_status(run_id=run_id) for run_id in run_ids}


def platform_statuses(*, run_id: UUID | str) -> dict[str, Status]:
    """The run's status per platform (planned = the platform's samples), for the run page."""
    planned = dict(
        Sample.objects.filter(run_id=run_id)
        .values_list("platform")
        .annotate(n=Count("id"))
        .order_by("platform")
    )
    return {
        platform: _status(Sample.objects.filter(run_id=run_id, platform=platform), n)
        for platform, n in planned.items()
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
