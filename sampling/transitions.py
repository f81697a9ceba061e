"""The one write path for a sample's four layers.

The state changes themselves are django-fsm transitions on `Sample` (sampling/models.py); this
module is how they reach the database. Two kinds of writer, two guards:

* Leased work (a worker executing a step) writes inside `fenced(...)`: the row is locked and
  the write is conditional on the fencing token of the worker's claim. An older token is
  refused and recorded as a `StaleWrite`. A step's outcomes (sampling/steps.py) write through
  here.
* Operator actions (cancelling a run, a reviewer's decision on an uncertain sample, an
  analyst's review decision) lock the sample and write with `save_unchanged`: a compare-and-set
  on the token and queue state read under that lock, so a worker that claimed the sample in
  between wins and the operator is told.

Both write the fields changed since the row was read (`plainsql.track` / `changed_fields`),
never a list kept by hand.

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

from .buckets import CANCELLED_REASON
from .locking import lock_leased_sample
from .locking import lock_sample as _lock_sample
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
from .plainsql import changed_fields, seen, track, update_changed

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
            track(sample)
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


def save_fenced(sample: Sample, token: int) -> None:
    """Conditional write of the fields of `sample` changed inside `fenced`: only while `token`
    is current. Fields written as `Now()` hold the database's time afterwards."""
    # A plain statement (sampling/plainsql.py): every step writes the sample once or twice.
    updated = update_changed(sample, values={"updated_at": Now()}, where={"fencing_token": token})
    if updated != 1:
        raise StaleToken(f"sample {sample.pk}: conditional write with token {token} matched no row")


# --- operator actions -----------------------------------------------------------------------


def lock_sample(sample_id: int) -> Sample:
    """`locking.lock_sample`, with the values read under the lock remembered for
    `save_unchanged`."""
    sample = _lock_sample(sample_id)
    track(sample)
    return sample


def save_unchanged(sample: Sample, *, read_queue_state: str) -> None:
    """Compare-and-set: write the fields changed since the sample was read (`lock_sample`, or
    `track` by the caller holding the lock) only if the token and queue state are still what
    the caller read. Raises ConcurrentChange otherwise."""
    changes: dict[str, Any] = {name: getattr(sample, name) for name in changed_fields(sample)}
    updated = Sample.objects.filter(
        pk=sample.pk, fencing_token=sample.fencing_token, queue_state=read_queue_state
    ).update(**changes, updated_at=Now())
    if updated != 1:
        raise ConcurrentChange(f"sample {sample.pk} changed while being written")
    track(sample)


# --- a collection that failed for good ------------------------------------------------------

NOT_COLLECTED = "not_collected"  # the analysis reason of a sample with no answer to analyse


def end_uncollected(sample: Sample, *, reason: str) -> None:
    """Collection failed for good: the evidence and analysis layers end too, with the reason,
    so no page or export shows "analysing" for a sample that will never be analysed. The
    caller's conditional write (`save_fenced` / `save_unchanged`) writes what changed."""
    sample.fail_collection()
    sample.failure_reason = reason[:REASON_LENGTH]
    if sample.evidence_state == EvidenceState.PENDING:
        sample.fail_evidence()
        sample.evidence_reason = f"no answer collected: {reason}"[:REASON_LENGTH]
    if sample.analysis_state == AnalysisState.PENDING:
        sample.fail_analysis()
        sample.analysis_reason = NOT_COLLECTED


# --- an answer the parser did not understand ------------------------------------------------

PARSE_FAILED = "parse_failed"  # the head of the analysis reason of such a sample


def hold_unparsed(sample: Sample, *, error: str) -> None:
    """The upstream answered, but in a format the parser does not understand. The answer was
    collected (its raw is kept as a capture revision) and is never asked again automatically:
    it waits in the analyst review queue with the parser's error, to be re-parsed once the
    parser is fixed (`manage.py reparse --sample`) or rejected."""
    if sample.collection_state == CollectionState.QUEUED:
        sample.start_collection()
    sample.complete_collection()
    sample.completed_at = Now()
    sample.store_partial_evidence()
    sample.evidence_reason = f"PARSE_FAILED: {error}"[:REASON_LENGTH]
    sample.send_to_review()
    sample.analysis_reason = f"{PARSE_FAILED}: {error}"[:REASON_LENGTH]


def cancel_unaccepted(sample: Sample, *, reason: str) -> bool:
    """Fail a sample the upstream never accepted, as part of a local cancel. The caller holds
    its row lock. False when a worker got to it first (it then finishes and is charged)."""
    track(sample)
    read_queue_state = sample.queue_state
    if not reason.startswith(CANCELLED_REASON):  # the report's cancelled bucket reads it
        reason = f"{CANCELLED_REASON}: {reason}"
    end_uncollected(sample, reason=reason)
    sample.step, sample.queue_state = Step.NONE, QueueState.DONE
    try:
        save_unchanged(sample, read_queue_state=read_queue_state)
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
        sample.claims, sample.due_at = 0, Now()
        try:
            save_unchanged(sample, read_queue_state=QueueState.PARKED)
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
    save_unchanged(sample, read_queue_state=QueueState.DONE)
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
        save_unchanged(sample, read_queue_state=QueueState.DONE)
    return sample


# --- resume: the one way out of a terminal state ---------------------------------------------


def reopen_for_resume(
    sample: Sample, *, resume_no: int, reason: str, actor: str = "", poll_again: bool = False
) -> None:
    """Ask a finished (or parked) sample again, as a new attempt of the same sample: its layers
    go back to the start, the next submit is attempt `attempts + 1`, and the re-open is
    recorded with what the sample was. Earlier attempts and captures stay as they are. The
    caller holds the run's and the sample's locks (sampling/locking.py); raises
    ConcurrentChange if a worker took the sample in between.

    `poll_again`: the upstream accepted a task for it that may still be there (we gave up
    polling it, the upstream never said it ended): it stays accepted under its task and
    attempt, and is polled again, never submitted a second time."""
    read_queue_state = sample.queue_state
    if read_queue_state not in (QueueState.DONE, QueueState.PARKED):
        raise ConcurrentChange(f"sample {sample.pk} is {read_queue_state}, not finished")
    track(sample)
    attempts_before = sample.attempts
    if not poll_again:
        sample.reopen_submission()
        sample.upstream_id = ""
        sample.accepted_at = None
    sample.reopen_collection()
    sample.reopen_evidence()
    sample.reopen_analysis()
    sample.failure_reason = sample.validity = sample.validity_reason = ""
    sample.evidence_reason = sample.analysis_reason = ""
    sample.step = Step.POLL if poll_again else Step.SUBMIT
    sample.queue_state = QueueState.READY
    sample.claims, sample.due_at = 0, Now()
    sample.completed_at = None
    sample.resumes += 1
    if not poll_again:  # a task polled again stays in the round of the attempt it came from
        sample.attempts_before_resume = sample.attempts
    SampleReopen.objects.create(
        sample=sample,
        run_id=sample.run_id,
        resume_no=resume_no,
        reason=reason[:64],
        attempts_before=attempts_before,
        states_before=_states_before(sample),
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
    save_unchanged(sample, read_queue_state=read_queue_state)


def _states_before(sample: Sample) -> dict[str, str]:
    """What a re-open changed of the layers, queue state, upstream id and reasons, as they
    were: the text fields among those it changed (counters and timestamps are not states)."""
    return {
        name: value
        for name in changed_fields(sample)
        if isinstance(value := seen(sample, name), str)
    }
