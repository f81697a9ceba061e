"""The one write path for a sample's four layers.

The state changes themselves are django-fsm transitions on `Sample` (sampling/models.py); this
module is how they reach the database. Two kinds of writer, two guards:

* Leased work (a worker executing a step) writes inside `fenced(...)` with `save_fenced`: the
  row is locked and the write is conditional on the fencing token of the worker's claim. An
  older token is refused and recorded as a `StaleWrite`.
* Operator actions (cancelling a run, a reviewer's decision on an uncertain sample, an
  analyst's review decision) lock the sample and write with `save_unchanged`: a compare-and-set
  on the token and queue state read under that lock, so a worker that claimed the sample in
  between wins and the operator is told.

Nothing else writes a sample's layers. Locks are taken in the order of sampling/locking.py.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import transaction
from django.db.models.functions import Now
from django_fsm import TransitionNotAllowed

from geo_collect import metrics

from .locking import lock_leased_sample, lock_sample
from .models import (
    AnalysisState,
    Attempt,
    AttemptStatus,
    CollectionState,
    EvidenceState,
    QueueState,
    Sample,
    SampleReopen,
    StaleReason,
    StaleWrite,
    Step,
    SubmissionState,
)
from .plainsql import update_row

REASON_LENGTH = 200  # Sample.failure_reason


class StaleToken(Exception):
    """The sample's fencing token moved on: this worker's result must not be written."""


class ConcurrentChange(Exception):
    """The sample changed between the operator's read and the write: nothing was written."""


class NotResolvable(ValueError):
    pass


class ReviewNotAllowed(Exception):
    """The review decision does not apply to the sample in its current state."""


# --- leased work ----------------------------------------------------------------------------


@contextmanager
def fenced(*, sample_id: int, token: int, operation: str, worker: str = "") -> Iterator[Sample]:
    """A transaction holding the sample's row, entered only with the current token and a lease
    that has not run out (`lease_until > now()` in database time, as the claim set it).

    A late writer is refused even when its lease was not yet swept: its step may already be
    due for someone else. The lease is checked once, under the row lock: while the lock is
    held nobody can requeue or claim the sample, so it cannot be taken over mid-block.
    A refusal is recorded (in its own transaction, so the record survives) and raises
    StaleToken. Inside the block, write with `save_fenced`.
    """
    with transaction.atomic():
        sample, lease_live = lock_leased_sample(sample_id)
        holder = sample.fencing_token == token and sample.queue_state == QueueState.LEASED
        if holder and lease_live:
            yield sample
            return
    metrics.stale_write_refused()
    StaleWrite.objects.create(
        sample_id=sample_id,
        operation=operation,
        presented_token=token,
        current_token=sample.fencing_token,
        worker=worker,
        reason=StaleReason.LEASE_EXPIRED if holder else StaleReason.TOKEN,
    )
    if holder:
        raise StaleToken(f"sample {sample_id}: the lease of token {token} has run out")
    raise StaleToken(f"sample {sample_id}: token {token} is stale ({sample.fencing_token} current)")


def save_fenced(sample: Sample, token: int, *field_names: str) -> None:
    """Conditional write of the named fields of `sample`: only while `token` is current."""
    # A plain statement (sampling/plainsql.py): every step writes the sample two or three times.
    updated = update_row(
        sample, field_names, values={"updated_at": Now()}, where={"fencing_token": token}
    )
    if updated != 1:
        raise StaleToken(f"sample {sample.pk}: conditional write with token {token} matched no row")


# --- operator actions -----------------------------------------------------------------------


def save_unchanged(sample: Sample, *field_names: str, read_queue_state: str, **extra: Any) -> None:
    """Compare-and-set: write the named fields only if the token and queue state are still
    what the caller read. Raises ConcurrentChange otherwise."""
    updated = Sample.objects.filter(
        pk=sample.pk, fencing_token=sample.fencing_token, queue_state=read_queue_state
    ).update(**_values(sample, field_names), **extra)
    if updated != 1:
        raise ConcurrentChange(f"sample {sample.pk} changed while being written")


# --- a collection that failed for good ------------------------------------------------------

NOT_COLLECTED = "not_collected"  # the analysis reason of a sample with no answer to analyse


def end_uncollected(sample: Sample, *, reason: str) -> tuple[str, ...]:
    """Collection failed for good: the evidence and analysis layers end too, with the reason,
    so no page or export shows "analysing" for a sample that will never be analysed. Returns
    the fields changed, for the caller's conditional write (`save_fenced` / `save_unchanged`).
    """
    sample.fail_collection()
    sample.failure_reason = reason[:REASON_LENGTH]
    if sample.evidence_state == EvidenceState.PENDING:
        sample.fail_evidence()
        sample.evidence_reason = f"no answer collected: {reason}"[:REASON_LENGTH]
    if sample.analysis_state == AnalysisState.PENDING:
        sample.fail_analysis()
        sample.analysis_reason = NOT_COLLECTED
    return UNCOLLECTED_FIELDS


UNCOLLECTED_FIELDS = (
    "collection_state",
    "failure_reason",
    "evidence_state",
    "evidence_reason",
    "analysis_state",
    "analysis_reason",
)


# --- an answer the parser did not understand ------------------------------------------------

PARSE_FAILED = "parse_failed"  # the head of the analysis reason of such a sample


def hold_unparsed(sample: Sample, *, error: str) -> tuple[str, ...]:
    """The upstream answered, but in a format the parser does not understand. The answer was
    collected (its raw is kept as a capture revision) and is never asked again automatically:
    it waits in the analyst review queue with the parser's error, to be re-parsed once the
    parser is fixed (`manage.py reparse --sample`) or rejected. Returns the fields changed."""
    if sample.collection_state == CollectionState.QUEUED:
        sample.start_collection()
    sample.complete_collection()
    sample.completed_at = Now()
    sample.store_partial_evidence()
    sample.evidence_reason = f"PARSE_FAILED: {error}"[:REASON_LENGTH]
    sample.send_to_review()
    sample.analysis_reason = f"{PARSE_FAILED}: {error}"[:REASON_LENGTH]
    return (
        "collection_state",
        "completed_at",
        "evidence_state",
        "evidence_reason",
        "analysis_state",
        "analysis_reason",
    )


def cancel_unaccepted(sample: Sample, *, reason: str) -> bool:
    """Fail a sample the upstream never accepted, as part of a local cancel. The caller holds
    its row lock. False when a worker got to it first (it then finishes and is charged)."""
    read_queue_state = sample.queue_state
    changed = end_uncollected(sample, reason=reason)
    sample.step, sample.queue_state = Step.NONE, QueueState.DONE
    try:
        save_unchanged(sample, *changed, "step", "queue_state", read_queue_state=read_queue_state)
    except ConcurrentChange:
        return False
    return True


class Resolution(enum.StrEnum):
    NOT_EXECUTED = "not_executed"  # established the upstream did not run it: ask again
    ABANDON = "abandon"  # keep it as a failed placeholder; it stays in every denominator


def resolve_uncertain(*, sample_id: int, resolution: Resolution, note: str = "") -> Sample:
    """A reviewer's decision on a sample parked because its acceptance could not be confirmed.
    Only a parked, uncertain sample can be resolved; anything else raises NotResolvable,
    naming its state. The decision is recorded on the open attempt."""
    with transaction.atomic():
        sample = lock_sample(sample_id)
        if not (
            sample.queue_state == QueueState.PARKED
            and sample.submission_state == SubmissionState.UNCERTAIN
        ):
            raise NotResolvable(
                f"sample {sample_id} is {sample.submission_state}/{sample.queue_state}, "
                "not parked as uncertain"
            )
        reason = f"reviewed: {resolution.value}" + (f" ({note})" if note else "")
        Attempt.objects.filter(
            sample=sample, status__in=[AttemptStatus.STARTED, AttemptStatus.UNKNOWN]
        ).update(status=AttemptStatus.FAILED, error_message=reason[:2000], finished_at=Now())
        if resolution is Resolution.NOT_EXECUTED:
            sample.confirm_not_accepted()
            sample.step, sample.queue_state = Step.SUBMIT, QueueState.READY
        else:
            end_uncollected(sample, reason=reason)
            sample.step, sample.queue_state = Step.NONE, QueueState.DONE
        sample.failure_reason = reason[:REASON_LENGTH]
        try:
            save_unchanged(
                sample,
                "submission_state",
                *UNCOLLECTED_FIELDS,
                "step",
                "queue_state",
                read_queue_state=QueueState.PARKED,
                claims=0,
                due_at=Now(),
            )
        except ConcurrentChange as error:
            raise NotResolvable(str(error)) from error
    return sample


def decide_analysis_review(*, sample_id: int, approve: bool | None) -> tuple[Sample, str]:
    """An analyst's decision on a finished sample, inside the caller's transaction. approve
    True / False moves analysis review to accepted / failed; None acknowledges partial
    evidence as it is (no state changes). Returns the sample and its analysis state before."""
    sample = lock_sample(sample_id)
    if sample.queue_state != QueueState.DONE:
        raise ReviewNotAllowed(f"sample {sample_id} is still being worked on")
    before = sample.analysis_state
    if approve is None:
        if sample.evidence_state != EvidenceState.PARTIAL or before == AnalysisState.REVIEW:
            raise ReviewNotAllowed("only partial evidence outside analysis review")
        return sample, before
    if approve and sample.analysis_reason.startswith(PARSE_FAILED):
        # Nothing was parsed, so there is no answer to accept: re-parse it or reject it.
        raise ReviewNotAllowed(
            f"sample {sample_id}: the answer could not be parsed ({sample.analysis_reason}); "
            "re-parse it after fixing the parser, or reject it"
        )
    try:
        sample.approve_review() if approve else sample.reject_review()
    except TransitionNotAllowed as error:
        decision = "accepted" if approve else "rejected"
        raise ReviewNotAllowed(
            f"sample {sample_id}: {decision} not allowed while analysis is {before}"
        ) from error
    save_unchanged(sample, "analysis_state", read_queue_state=QueueState.DONE)
    return sample, before


# --- late evidence -------------------------------------------------------------------------


def mark_evidence_repaired(*, sample_id: int, note: str) -> Sample:
    """Partial evidence completed later (pipeline/repair.py stored what was missing): the
    evidence layer moves partial -> stored, with what was repaired kept in the reason."""
    with transaction.atomic():
        sample = lock_sample(sample_id)
        if sample.queue_state != QueueState.DONE:
            raise ConcurrentChange(f"sample {sample_id} is still being worked on")
        sample.repair_evidence()
        sample.evidence_reason = f"repaired ({note}); was: {sample.evidence_reason}"[:REASON_LENGTH]
        save_unchanged(
            sample, "evidence_state", "evidence_reason", read_queue_state=QueueState.DONE
        )
    return sample


# --- resume: the one way out of a terminal state ---------------------------------------------

_REOPENED_FIELDS = (
    "submission_state",
    "collection_state",
    "evidence_state",
    "analysis_state",
    "upstream_id",
    "failure_reason",
    "validity",
    "validity_reason",
    "evidence_reason",
    "analysis_reason",
    "step",
    "queue_state",
    "resumes",
    "attempts_before_resume",
)


def reopen_for_resume(sample: Sample, *, resume_no: int, reason: str, actor: str = "") -> None:
    """Ask a finished (or parked) sample again, as a new attempt of the same sample: its layers
    go back to the start, the next submit is attempt `attempts + 1`, and the re-open is
    recorded with what the sample was. Earlier attempts and captures stay as they are. The
    caller holds the run's and the sample's locks (sampling/locking.py); raises
    ConcurrentChange if a worker took the sample in between."""
    read_queue_state = sample.queue_state
    if read_queue_state not in (QueueState.DONE, QueueState.PARKED):
        raise ConcurrentChange(f"sample {sample.pk} is {read_queue_state}, not finished")
    SampleReopen.objects.create(
        sample=sample,
        run_id=sample.run_id,
        resume_no=resume_no,
        reason=reason[:64],
        attempts_before=sample.attempts,
        states_before={name: getattr(sample, name) for name in _REOPENED_FIELDS[:12]},
        actor=actor[:150],
    )
    # An attempt whose outcome was never known is closed with the reason it was left.
    Attempt.objects.filter(
        sample=sample, status__in=[AttemptStatus.STARTED, AttemptStatus.UNKNOWN]
    ).update(
        status=AttemptStatus.FAILED,
        error_message=f"superseded by resume {resume_no}",
        finished_at=Now(),
    )
    sample.reopen_submission()
    sample.reopen_collection()
    sample.reopen_evidence()
    sample.reopen_analysis()
    sample.upstream_id = ""
    sample.failure_reason = sample.validity = sample.validity_reason = ""
    sample.evidence_reason = sample.analysis_reason = ""
    sample.step, sample.queue_state = Step.SUBMIT, QueueState.READY
    sample.resumes += 1
    sample.attempts_before_resume = sample.attempts
    save_unchanged(
        sample,
        *_REOPENED_FIELDS,
        read_queue_state=read_queue_state,
        claims=0,
        due_at=Now(),
        accepted_at=None,
        completed_at=None,
    )


def _values(sample: Sample, field_names: tuple[str, ...]) -> dict[str, Any]:
    values: dict[str, Any] = {name: getattr(sample, name) for name in field_names}
    values["updated_at"] = Now()
    return values
