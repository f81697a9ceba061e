"""A leased sample's step and its named outcomes: the one place a worker's step changes a sample.

`fenced_step(...)` locks the sample (`sampling.transitions.fenced`: the claim's token, a live
lease) and yields a `SampleStep`. Inside, the caller records what the step produced (captures,
analysis rows), then says what happened by calling one outcome: `accepted`, `answer_kept`,
`answered`, `archive_later`, `submit_failed`, `uncertain`, `park`, `hold_unparsed`, `fail`,
`retry_later`, `poll_again`, ... Each outcome applies its FSM transitions and the queue
release (step, queue state, due time, lease, claims) and ends in one compare-and-set write of
the fields it changed, computed against the row as locked (`plainsql.changed_fields`;
conditional on the fencing token, row count checked, StaleToken otherwise). Each emits its
metric and log line where it happens, so nobody reads the sample again to find out what a
step did (geo_collect/metrics.py).

Network I/O never happens here: the caller does it before entering, outside any transaction.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, Protocol
from uuid import UUID

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Func, JSONField, Model
from django.db.models.functions import Now

from connectors.base import ErrorClass, SubmitOutcome, UpstreamError
from connectors.retry import POLL, RETRY, RetryDecision
from geo_collect import logs, metrics

from .leases import lease_ends_after
from .models import (
    Attempt,
    AttemptStatus,
    CollectionState,
    EvidenceState,
    QuestionRevision,
    QueueState,
    Run,
    Sample,
    Step,
    SubmissionState,
)
from .plainsql import (
    changed_fields,
    columns,
    from_row,
    insert_rows,
    reset,
    seen,
    track,
    tracked,
    update_changed,
    write_if,
)
from .plainsql import cursor as plain_cursor
from .transitions import REASON_LENGTH, end_uncollected, fenced, hold_unparsed, save_fenced

log = logging.getLogger(__name__)

# Retrying these is the policy's call; when it gives up on one, the reason says why.
_RETRYABLE = frozenset(
    {
        ErrorClass.RATE_LIMITED,
        ErrorClass.TRANSIENT,
        ErrorClass.UNREACHABLE,
        ErrorClass.TRUNCATED,
        ErrorClass.LOST,
    }
)


# The error class of an uncertain attempt asked again by its platform's policy: whether the
# upstream answered (and billed) it is unknown.
REASKED_UNKNOWN = "reasked_unknown"


class Verdict(Protocol):
    """An analysis of the sample's answer (analysis.services.Verdict), applied in the write
    that records it."""

    @property
    def valid(self) -> bool: ...

    def apply(self, sample: Sample) -> None: ...

    def decide(self, sample: Sample) -> None: ...

    def rows(self) -> list[Model]: ...


class Evidence:
    """How a collected answer's evidence settles: stored, or partial with the reason."""

    def __init__(self, *, partial_reason: str = "") -> None:
        self.partial_reason = partial_reason


STORED = Evidence()


# --- the sample as a step reads it ---------------------------------------------------------


class _WithoutQuestions(Func):
    """A run's frozen snapshot without its question list."""

    template = "json_remove(%(expressions)s, '$.questions')"
    output_field = JSONField()

    def as_postgresql(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        template = "(%(expressions)s - 'questions')"
        return self.as_sql(compiler, connection, template=template, **extra_context)


# The sample and its question revision, in one plain statement: it runs for every step, so
# it skips the ORM (sampling/plainsql.py). The last column: whether the lease has more than
# the given seconds left (`lease_fresh`).
_LOAD_FOR_STEP = """SELECT {sample}, {question}, {fresh}
  FROM {samples} s
  JOIN {questions} q ON q.id = s.question_revision_id
 WHERE s.id = %s"""
_FRESH = "_lease_fresh"  # where load_for_step keeps it, in the instance's __dict__
# A lease with more than this share of GEO_LEASE_SECONDS left needs no renewal before a step
# starts: the step's own renewer (pipeline.step_context.keep_lease) renews it every third of a
# lease, while at least a third is still left.
FRESH_SHARE = 2 / 3


@lru_cache(maxsize=2)  # per database vendor: the lease's end is written per vendor
def _load_sql(vendor: str) -> str:
    return _LOAD_FOR_STEP.format(
        sample=columns(Sample, "s"),
        question=columns(QuestionRevision, "q"),
        fresh=lease_ends_after("%s", column="s.lease_until"),
        samples=Sample._meta.db_table,
        questions=QuestionRevision._meta.db_table,
    )


def lease_fresh(sample: Sample) -> bool:
    """Whether, when `load_for_step` read it, the sample's lease had more than FRESH_SHARE of
    a lease left: a claim just made, not one whose message waited in the queue (False for a
    sample read otherwise)."""
    return bool(sample.__dict__.get(_FRESH, False))


# What a step reads of its run: what launch froze. The rest (cancelled_at, finished_at, ...)
# changes during the run and stays deferred, read from the database if ever accessed.
_FROZEN_RUN_FIELDS = ("id", "tenant_id", "campaign_id", "planned_samples", "created_at")


def load_for_step(sample_id: int) -> Sample | None:
    """The sample with its run and question, as a step uses them. The question revision is
    immutable and the run's snapshot frozen at launch, so the run is read once per process
    (`_frozen_run`), without its question list: the one part of the snapshot that grows with
    the campaign (about 100 KB for 1,000 questions), which no step reads. The run is only read
    here, never saved."""
    fresh_seconds = settings.GEO_LEASE_SECONDS * FRESH_SHARE
    with plain_cursor() as cursor:  # prepared: once in every step
        cursor.execute(_load_sql(connection.vendor), [fresh_seconds, sample_id])
        row = cursor.fetchone()
    if row is None:
        return None
    sample = from_row(Sample, row)
    sample.question_revision = from_row(QuestionRevision, row[len(Sample._meta.concrete_fields) :])
    sample.__dict__[_FRESH] = bool(row[-1])
    sample.run = Run.from_db(connection.alias, *_frozen_run(connection.alias, sample.run_id))
    return sample


@lru_cache(maxsize=256)
def _frozen_run(alias: str, run_id: UUID) -> tuple[list[str], list[Any]]:
    """The frozen fields of a run, as `Run.from_db` takes them (names and values in the model's
    field order). Run ids are UUIDs, never reused, and launch froze these fields, so a cached
    entry cannot go stale."""
    row = (
        Run.objects.using(alias)
        .filter(pk=run_id)
        .annotate(step_snapshot=_WithoutQuestions("config_snapshot"))
        .values(*_FROZEN_RUN_FIELDS, "step_snapshot")
        .get()
    )
    row["config_snapshot"] = row.pop("step_snapshot")
    names = [f.attname for f in Run._meta.concrete_fields if f.attname in row]
    return names, [row[name] for name in names]


# --- an attempt begun at once -----------------------------------------------------------


def begin_attempt_at_once(sample: Sample, *, token: int, model: str) -> Attempt | None:
    """Before the upstream is asked, as `SampleStep.attempt_started`, without a lock or a
    transaction of its own: one statement (`plainsql.write_if`), committed on its own (the
    common case of a submit: a planned sample, its lease live, its run going on). The sample
    moves to `submitting` if the claim's token still holds a live lease, the sample is as the
    step read it and its run is not cancelled; the attempt row is inserted in the same
    statement. `sample`: as the step loaded it; it holds the write afterwards. None: something
    did not hold (a stale token, a lapsed lease, a sample changed since, a cancelled run) and
    nothing was written; the locked path (`fenced_step`) then finds out what and does it.
    PostgreSQL only; None elsewhere."""
    if connection.vendor != "postgresql" or sample.submission_state != SubmissionState.PLANNED:
        return None
    track(sample)
    where = {"fencing_token": token, "queue_state": QueueState.LEASED, "attempts": sample.attempts}
    where["submission_state"] = sample.submission_state
    sample.attempts += 1
    sample.begin_submit()
    attempt = _next_attempt(sample, token=token, model=model, attempt_no=sample.attempts)
    if not write_if(
        sample,
        where=where,
        condition=f"{_LEASE_LIVE} AND {_RUN_GOING_ON}",
        values={"updated_at": Now()},
        then_insert=[attempt],
    ):
        reset(sample)
        return None
    track(attempt)
    return attempt


_LEASE_LIVE = "lease_until > statement_timestamp()"
_RUN_GOING_ON = f"""NOT EXISTS (SELECT 1 FROM {Run._meta.db_table} r
 WHERE r.id = {Sample._meta.db_table}.run_id AND r.cancelled_at IS NOT NULL)"""


def step_at_once(
    sample: Sample, *, token: int, on_end: Callable[[UUID], None] | None = None
) -> SampleStep | None:
    """The step of `sample` without a lock: its outcome and the rows that go with it are
    written together by `SampleStep.write_at_once`, in one statement conditional on the
    sample being as read. `sample`: as the step read or last wrote it (tracked). `on_end`, as
    for `fenced_step`. None where that cannot be done (not PostgreSQL, a sample not tracked):
    take the locked path."""
    if connection.vendor != "postgresql" or not tracked(sample):
        return None
    return SampleStep(sample, token=token, on_end=on_end, at_once=True)


def _next_attempt(s: Sample, *, token: int, model: str, attempt_no: int) -> Attempt:
    """The sample's attempt number `attempt_no` and its idempotency key."""
    return Attempt(
        sample=s,
        attempt_no=attempt_no,
        idempotency_key=f"{s.run_id}:{s.pk}:{attempt_no}",
        fencing_token=token,
        model=model,
    )


# --- the step, locked --------------------------------------------------------------------


@contextmanager
def fenced_step(
    *,
    sample_id: int,
    token: int,
    operation: str,
    worker: str = "",
    loaded: Sample | None = None,
    on_end: Callable[[UUID], None] | None = None,
) -> Iterator[SampleStep]:
    """The sample locked for one outcome of a leased step. `loaded`: the sample as the step
    read it before; its run and question (frozen at launch) are reused, not read again.
    `on_end(run_id)` runs after the commit of an outcome that ended the sample."""
    with fenced(sample_id=sample_id, token=token, operation=operation, worker=worker) as sample:
        if loaded is not None:
            sample.run = loaded.run
            sample.question_revision = loaded.question_revision
        yield SampleStep(sample, token=token, on_end=on_end)


class SampleStep:
    """One leased sample, locked; its outcomes below. An outcome returns what happened, as the
    step reports it (logs, the step-duration metric, tests)."""

    def __init__(
        self,
        sample: Sample,
        *,
        token: int,
        on_end: Callable[[UUID], None] | None = None,
        at_once: bool = False,
    ) -> None:
        self.sample = sample
        self.token = token
        self.attempt: Attempt | None = None  # the attempt this step works under, if any
        self._on_end = on_end
        # Unlocked (`step_at_once`): the outcome's writes wait for `write_at_once`.
        self._at_once = at_once
        self._then_update: list[Model] = []
        self._then_insert: list[Model] = []  # rows the outcome adds (an analysis)
        self._after_write: list[Callable[[], None]] = []
        self._decided: tuple[str, dict[str, str]] | None = None  # outcome, states before

    # --- submit ------------------------------------------------------------------------------

    def attempt_started(self, *, model: str) -> Attempt:
        """Before the upstream is asked: the attempt and its idempotency key are recorded, and
        the submission is `submitting` (a holder that vanishes now leaves it to be verified).
        The lease is kept: the call follows."""
        s = self.sample
        s.attempts += 1
        attempt = _next_attempt(s, token=self.token, model=model, attempt_no=s.attempts)
        insert_rows([attempt])  # a plain INSERT (sampling/plainsql.py)
        track(attempt)
        self.attempt = attempt
        s.begin_submit()
        self._save("")
        return attempt

    def cancelled(self) -> str:
        """The run was cancelled before the upstream was asked: never sent."""
        end_uncollected(self.sample, reason="cancelled by operator")
        return self._release_and_save("cancelled", step=Step.NONE)

    def uncertain(self) -> str:
        """A request went out and its outcome is unknown (a lost answer, or a holder that
        vanished mid-call): verify before anything is sent again."""
        self.sample.mark_uncertain()
        return self._release_and_save("uncertain", step=Step.VERIFY)

    def close_attempt(
        self,
        attempt: Attempt,
        *,
        status: str,
        error: UpstreamError | None = None,
        outcome: SubmitOutcome | None = None,
        error_class: str = "",
        error_message: str = "",
    ) -> None:
        """The upstream answered the attempt (or failed it): its outcome, written with the
        fields it changed, and the upstream's response counted."""
        if not tracked(attempt):
            track(attempt)
        self.attempt = attempt
        attempt.status = status
        attempt.finished_at = Now()
        if error is not None:
            attempt.error_class = error.error_class.value
            attempt.error_message = error.message[:2000]
            attempt.status_code = error.status_code
            attempt.retry_after_seconds = error.retry_after
            attempt.request_id = error.request_id or ""
            attempt.egress = error.egress or "direct"
        if outcome is not None:
            attempt.upstream_id = outcome.upstream_id
            attempt.request_id = outcome.request_id or ""
            attempt.egress = outcome.egress or "direct"
            if outcome.cost is not None and outcome.cost_currency:
                # Charged when the task was posted (a vendor that says so in its answer).
                attempt.cost, attempt.cost_currency = outcome.cost, outcome.cost_currency
        if error_class:  # an answer that came back unusable (truncated, failed mid-stream)
            attempt.error_class, attempt.error_message = error_class, error_message[:2000]
        if self._at_once:
            self._then_update.append(attempt)
            self._after_write.append(lambda: self._attempt_closed(attempt))
            return
        update_changed(attempt)
        self._attempt_closed(attempt)

    def _attempt_closed(self, attempt: Attempt) -> None:
        logs.bind(attempt_no=attempt.attempt_no, request_id=attempt.request_id)
        response = str(attempt.status_code) if attempt.status_code else "none"
        metrics.UPSTREAM_RESPONSES.labels(
            self.sample.platform, response, attempt.error_class or "ok"
        ).inc()

    def answer_kept(self, *, upstream_id: str, answered: bool) -> str:
        """A direct API's answer was read and is kept in the answer inbox, written in this
        transaction with its attempt's outcome: it is archived next (`Step.ARCHIVE`), by this
        worker at once, or by the next claim should this one die or the evidence store refuse.
        `answered`: an answer, understood or not (accepted now); otherwise one that came back
        unusable (truncated, failed mid-stream), asked again once its raw is archived. The
        lease is kept: the archive follows."""
        s = self.sample
        if answered:
            s.accept()
            s.upstream_id = upstream_id
            s.accepted_at = Now()
        s.step = Step.ARCHIVE
        s.claims = 0
        self._save("")
        return "answer-kept"

    def archive_later(self, decision: RetryDecision, *, outage: bool) -> str:
        """Archiving the kept answer failed: archived again after the policy's delay, from the
        inbox, never asked again. An outage of the evidence store (or of the database) is not
        a step that keeps failing: its claims do not count towards the poison cap."""
        if outage:
            self.sample.claims = 0
        return self._retry(f"retry-later:{Step.ARCHIVE}", Step.ARCHIVE, decision, "archive")

    def accepted(self, *, upstream_id: str, poll_in: float) -> str:
        """An asynchronous upstream accepted the task: poll it next."""
        s = self.sample
        s.accept()
        s.upstream_id = upstream_id
        s.accepted_at = Now()
        return self._release_and_save("accepted", step=Step.POLL, delay=poll_in)

    def answered(
        self, *, upstream_id: str, evidence: Evidence | None, verdict: Verdict | None
    ) -> str:
        """A direct API answered in the submit call. `evidence` None: the screenshot is still
        to be rendered (the evidence step). `verdict`: analysed in this write; None sends the
        sample to the analysis queue."""
        s = self.sample
        if s.submission_state == SubmissionState.SUBMITTING:  # not yet accepted by answer_kept
            s.accept()
            s.accepted_at = Now()
        s.upstream_id = upstream_id
        s.start_collection()
        if evidence is None:
            s.complete_collection()
            s.completed_at = Now()
            return self._release_and_save("answered", step=Step.EVIDENCE)
        return self._collected("answered", evidence, verdict)

    def submit_failed(
        self, decision: RetryDecision, *, error_class: ErrorClass, message: str
    ) -> str:
        """The attempt brought no usable answer, so the question counts as not yet asked:
        asked again after the policy's delay, or failed for good with its reason."""
        self.sample.reject_submit()
        if decision.action == RETRY:
            outcome = f"retry:{error_class.value}"
            return self._retry(outcome, Step.SUBMIT, decision, error_class.value)
        reason = f"{error_class.value}: {message}"
        if error_class in _RETRYABLE:  # it gave up on a retryable error: say why
            reason = f"{reason} ({decision.reason})"
        return self.fail(reason=reason, outcome=f"failed:{error_class.value}")

    def hold_unparsed(self, *, upstream_id: str | None, error: str) -> str:
        """The upstream answered in a format the parser does not understand: the raw is
        archived; the sample waits in the analyst review queue, never asked again."""
        s = self.sample
        if s.submission_state == SubmissionState.SUBMITTING:
            s.accept()
            s.accepted_at = Now()
        s.upstream_id = upstream_id or s.upstream_id
        hold_unparsed(s, error=error or "format not understood")
        return self._release_and_save("parse-failed:review", step=Step.NONE)

    # --- verify ------------------------------------------------------------------------------

    def verified(
        self, attempt: Attempt, *, upstream_id: str, cost: tuple[int, str] | None = None
    ) -> str:
        """The upstream has a task for the attempt's idempotency key: it was accepted. `cost`:
        what the upstream says it charged for it (`Connector.find_again`), recorded on the
        attempt as its submit answer would have been."""
        values: dict[str, Any] = {"status": AttemptStatus.ACCEPTED, "upstream_id": upstream_id}
        if cost is not None and attempt.cost is None:
            values["cost"], values["cost_currency"] = cost
        self._write_attempt(attempt, **values)
        s = self.sample
        s.confirm_accepted()
        s.upstream_id = upstream_id
        s.accepted_at = Now()
        return self._release_and_save("verified-accepted", step=Step.POLL)

    def not_accepted(self, attempt: Attempt) -> str:
        """The upstream has no task for the key: the question is sent again."""
        self._write_attempt(
            attempt,
            status=AttemptStatus.FAILED,
            error_message="upstream has no task for this idempotency key",
        )
        self.sample.confirm_not_accepted()
        return self._release_and_save("verified-not-accepted", step=Step.SUBMIT)

    def reasked(self, attempt: Attempt, *, reason: str) -> str:
        """The platform cannot say whether the uncertain attempt was accepted, and its policy
        is to ask again (not to park for a person): the question is sent again as a new
        attempt. The uncertain one is closed with that reason (`REASKED_UNKNOWN`): its outcome
        and upstream cost were never learned (billing.reconciliation lists it as cost
        unknown)."""
        self._write_attempt(
            attempt,
            status=AttemptStatus.FAILED,
            error_class=REASKED_UNKNOWN,
            error_message=reason,
            finished_at=Now(),
        )
        self.sample.confirm_not_accepted()
        return self._release_and_save("uncertain-reasked", step=Step.SUBMIT)

    # --- poll and evidence -------------------------------------------------------------------

    def poll_again(self, decision: RetryDecision, *, state: str) -> str:
        """The task is queued or running upstream: poll again after the policy's delay."""
        assert decision.action == POLL
        s = self.sample
        if state == "running" and s.collection_state == CollectionState.QUEUED:
            s.start_collection()
        self._release(step=Step.POLL, delay=decision.delay_seconds)
        s.claims = 0  # a poll answered: not a failed claim
        return self._save(f"poll:{state}")

    def poll_completed(self) -> str:
        """The task completed upstream: fetch its evidence next."""
        if self.sample.collection_state == CollectionState.QUEUED:
            self.sample.start_collection()
        return self._release_and_save("poll:completed", step=Step.EVIDENCE)

    def evidence_stored(self, *, evidence: Evidence, verdict: Verdict | None) -> str:
        """The task's result was fetched and its capture recorded: collection completes."""
        if self.sample.collection_state == CollectionState.QUEUED:
            self.sample.start_collection()
        return self._collected("evidence-stored", evidence, verdict)

    def screenshot(self, *, missing: str) -> str:
        """The answer page was photographed (or could not be: `missing` says why; the answer
        still counts): analysis next."""
        s = self.sample
        if missing:
            s.store_partial_evidence()
            s.evidence_reason = missing
        else:
            s.store_evidence()
        outcome = "screenshot-partial" if missing else "screenshot-stored"
        return self._release_and_save(outcome, step=Step.ANALYSE)

    # --- analyse -----------------------------------------------------------------------------

    def analysed(self, verdict: Verdict) -> str:
        verdict.apply(self.sample)
        self._release(step=Step.NONE)
        return self._save(f"analysed:{self.sample.analysis_state}")

    # --- any step ----------------------------------------------------------------------------

    def fail(self, *, reason: str, outcome: str = "failed") -> str:
        """Collection failed for good, with the reason; the evidence and analysis layers end."""
        end_uncollected(self.sample, reason=reason)
        return self._release_and_save(outcome, step=Step.NONE)

    def retry_later(self, decision: RetryDecision) -> str:
        """The step is done again after the policy's delay (an upstream that failed to answer
        a poll, a lookup or a fetch, or a step that raised)."""
        step = self.sample.step
        return self._retry(f"retry-later:{step}", step, decision, step)

    def park(self, *, reason: str) -> str:
        """Stop automatic work; a person decides. It stays in every denominator as pending."""
        s = self.sample
        step = s.step
        if s.submission_state == SubmissionState.SUBMITTING and step != Step.ARCHIVE:
            # A request may have gone out: parked as uncertain, so it is shown and resolved
            # as such, never re-sent blindly. (At `archive` its answer is in the inbox.)
            s.mark_uncertain()
            step = Step.VERIFY
        s.failure_reason = reason[:REASON_LENGTH]
        return self._release_and_save("parked", step=step, state=QueueState.PARKED)

    # --- the one write -----------------------------------------------------------------------

    def _collected(self, outcome: str, evidence: Evidence, verdict: Verdict | None) -> str:
        s = self.sample
        s.complete_collection()
        s.completed_at = Now()
        if evidence.partial_reason:
            s.store_partial_evidence()
            s.evidence_reason = evidence.partial_reason[:REASON_LENGTH]
        else:
            s.store_evidence()
        if verdict is None:
            return self._release_and_save(outcome, step=Step.ANALYSE)
        if self._at_once:  # its rows go in the outcome's one statement
            verdict.decide(s)
            self._then_insert += verdict.rows()
        else:
            verdict.apply(s)
        return self._release_and_save(outcome, step=Step.NONE)

    def _retry(self, outcome: str, step: str, decision: RetryDecision, reason: str) -> str:
        assert decision.action in (RETRY, POLL), decision
        metrics.RETRIES.labels(self.sample.platform, seen(self.sample, "step"), reason).inc()
        self._release(step=step, delay=decision.delay_seconds)
        if not decision.counted:  # an unreachable platform, a poll bounded by its deadline
            self.sample.claims = 0
        return self._save(outcome)

    def _release(self, *, step: str, delay: float = 0.0, state: str = QueueState.READY) -> None:
        s = self.sample
        if step != s.step:
            s.claims = 0
        s.step = step
        s.queue_state = state if step != Step.NONE else QueueState.DONE
        s.due_at = Now() + timedelta(seconds=delay) if delay else Now()
        s.lease_until = None
        s.lease_owner = ""

    def _release_and_save(
        self, outcome: str, *, step: str, delay: float = 0.0, state: str = QueueState.READY
    ) -> str:
        self._release(step=step, delay=delay, state=state)
        return self._save(outcome)

    def _save(self, outcome: str) -> str:
        """The compare-and-set write of what the outcome changed, then its metrics."""
        s = self.sample
        before = {name: seen(s, name) for name in ("submission_state", "evidence_state")}
        if self._at_once:
            self._decided = (outcome, before)
            return outcome
        changed = changed_fields(s)
        save_fenced(s, self.token)
        self._saved(outcome, before, changed)
        return outcome

    def _saved(self, outcome: str, before: dict[str, str], changed: list[str]) -> None:
        s = self.sample
        if outcome:
            log.info("step outcome %s sample=%s changed=%s", outcome, s.pk, changed)
        self._observe(before)
        if s.queue_state == QueueState.DONE and self._on_end is not None:
            # After the commit that ended the sample, see whether its run has ended: two last
            # samples ending at once in two transactions would each still see the other
            # running. (The dispatcher's sweep catches a process that dies in between.)
            on_end, run_id = self._on_end, s.run_id
            transaction.on_commit(lambda: on_end(run_id))  # at once outside a transaction

    # --- unlocked: the outcome and its rows in one statement ---------------------------------

    def write_at_once(
        self,
        *,
        then_insert: Sequence[Model] = (),
        then_delete: Sequence[Model] = (),
        skip_conflicts: Sequence[Model] = (),
    ) -> bool:
        """Write the outcome decided on this unlocked step (`step_at_once`), the attempts it
        closed, the analysis it applied, `then_insert` and `then_delete` in one statement, if
        the sample is still as the step read it (its step, submission and attempts as
        tracked) under the claim's token and a live lease. False: nothing was written and the
        sample is as it was read (`forget`); the locked path (`fenced_step`) then finds out
        why and does what is due. A row that is already there (a unique key) is the locked
        path's to sort out too."""
        assert self._at_once and self._decided is not None, "decide an outcome first"
        s = self.sample
        outcome, before = self._decided
        changed = changed_fields(s)
        where = {name: seen(s, name) for name in ("step", "submission_state", "attempts")}
        where.update(fencing_token=self.token, queue_state=QueueState.LEASED)
        # In a caller's transaction, a savepoint: a row already there must not end it.
        nested = transaction.atomic() if connection.in_atomic_block else nullcontext()
        matched = False
        try:
            with nested:
                matched = write_if(
                    s,
                    where=where,
                    condition=_LEASE_LIVE,
                    values={"updated_at": Now()},
                    then_update=self._then_update,
                    then_insert=[*then_insert, *self._then_insert],
                    then_delete=then_delete,
                    skip_conflicts=skip_conflicts,
                )
        except IntegrityError:
            pass  # a row already there: the locked path sorts it out
        finally:
            if not matched:
                self.forget()
        if not matched:
            return False
        for written in self._after_write:
            written()
        self._saved(outcome, before, changed)
        return True

    def forget(self) -> None:
        """The outcome decided and not written: the sample's values as read, so that an outcome
        can be decided again (its transitions start from the state read)."""
        reset(self.sample)
        self._then_update.clear()
        self._then_insert.clear()
        self._after_write.clear()
        self._decided = None

    def _observe(self, before: dict[str, str]) -> None:
        s = self.sample
        accepted_now = (
            before["submission_state"] != SubmissionState.ACCEPTED
            and s.submission_state == SubmissionState.ACCEPTED
        )
        started = None if self.attempt is None else self.attempt.started_at
        # Both in database time: `accepted_at` as the write stored it (read back with it).
        if accepted_now and isinstance(started, datetime) and isinstance(s.accepted_at, datetime):
            latency = (s.accepted_at - started).total_seconds()
            metrics.ACCEPTANCE_LATENCY.labels(s.platform).observe(max(0.0, latency))
        if before["evidence_state"] == EvidenceState.PENDING != s.evidence_state:
            metrics.EVIDENCE_RECORDED.labels(s.platform, s.evidence_state).inc()

    def _write_attempt(self, attempt: Attempt, **values: Any) -> None:
        if not tracked(attempt):
            track(attempt)
        self.attempt = attempt
        for name, value in values.items():
            setattr(attempt, name, value)
        update_changed(attempt)
