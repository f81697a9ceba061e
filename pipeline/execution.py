"""Executing one step of one sample: submit, verify, poll, evidence, analyse.

Each step is entered with a fencing token from a claim. The pattern is always the same:
1. a short transaction records intent (the attempt and its idempotency key) before any call;
2. the upstream call happens outside any transaction, with the lease renewed meanwhile;
3. a second transaction, conditional on the token, records the outcome and the next step.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from functools import lru_cache, partial
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Func, JSONField
from django.db.models.functions import Now

from analysis.services import AnalysisAhead, analyse_ahead, analyse_sample
from billing import services as billing
from billing.costs import apply_cost, price_usage, queue_attempt_cost
from connectors.base import (
    ErrorClass,
    NormalizedResult,
    SampleRequest,
    SubmitOutcome,
    UpstreamError,
)
from connectors.registry import get_connector
from connectors.retry import RetryPolicy
from connectors.usage import extract_usage
from evidence import services as evidence_services
from evidence.models import Capture
from evidence.screenshots import ScreenshotUnavailable, render_answer_page
from geo_collect.failpoints import failpoint
from pipeline.runs import finish_run_if_done
from sampling import inputs
from sampling.dbtime import db_now
from sampling.leases import renew_lease
from sampling.models import (
    Attempt,
    AttemptStatus,
    CollectionState,
    QuestionRevision,
    QueueState,
    Run,
    Sample,
    Step,
    SubmissionState,
)
from sampling.plainsql import columns, from_row, insert_rows, update_row
from sampling.transitions import (
    StaleToken,
    end_uncollected,
    fenced,
    hold_unparsed,
    save_fenced,
)

log = logging.getLogger(__name__)

# Poll interval grows with the task's age: quick answers are picked up quickly, slow ones do
# not hammer the provider.
POLL_MIN_SECONDS = 0.5
POLL_MAX_SECONDS = 30.0


class DuplicateInFlight(Exception):
    """A second delivery of a message whose first copy is still working under the same
    lease (e.g. redelivered by the broker's visibility timeout)."""


@dataclass(frozen=True)
class StepContext:
    sample_id: int
    token: int
    worker: str
    # The sample as read before the step, with its run and question (frozen at launch): the
    # step's fenced writes reuse them instead of reading them again (`_fenced`).
    loaded: Sample | None = field(default=None, compare=False)


class _WithoutQuestions(Func):
    """A run's frozen snapshot without its question list."""

    template = "json_remove(%(expressions)s, '$.questions')"
    output_field = JSONField()

    def as_postgresql(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        template = "(%(expressions)s - 'questions')"
        return self.as_sql(compiler, connection, template=template, **extra_context)


# The sample and its question revision, in one plain statement: it runs for every step, so
# it skips the ORM (sampling/plainsql.py).
_LOAD_FOR_STEP = f"""SELECT {columns(Sample, "s")}, {columns(QuestionRevision, "q")}
  FROM {Sample._meta.db_table} s
  JOIN {QuestionRevision._meta.db_table} q ON q.id = s.question_revision_id
 WHERE s.id = %s"""
# What a step reads of its run: what launch froze. The rest (cancelled_at, finished_at, ...)
# changes during the run and stays deferred, read from the database if ever accessed.
_FROZEN_RUN_FIELDS = ("id", "tenant_id", "campaign_id", "planned_samples", "created_at")


def load_for_step(sample_id: int) -> Sample | None:
    """The sample with its run and question, as a step uses them. The question revision is
    immutable and the run's snapshot frozen at launch, so the run is read once per process
    (`_frozen_run`), without its question list: the one part of the snapshot that grows with
    the campaign (about 100 KB for 1,000 questions), which no step reads. The run is only read
    here, never saved."""
    with connection.cursor() as cursor:
        cursor.execute(_LOAD_FOR_STEP, [sample_id])
        row = cursor.fetchone()
    if row is None:
        return None
    sample = from_row(Sample, row)
    sample.question_revision = from_row(QuestionRevision, row[len(Sample._meta.concrete_fields) :])
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


def run_step(*, sample_id: int, token: int, worker: str = "", loaded: Sample | None = None) -> str:
    """Execute the step the sample is leased for. Returns what happened, for logs and tests.
    `loaded`: the sample with its run and question, read by the caller just before (the step
    recorder reads it anyway); otherwise it is read here.

    A message for a stale token (a duplicate, or work taken over after lease expiry) does
    nothing: the sample's current holder owns it.
    """
    sample = loaded or load_for_step(sample_id)
    if sample is None:
        return "missing"
    if sample.fencing_token != token or sample.queue_state != QueueState.LEASED:
        return "stale-message"
    handler = _HANDLERS.get(sample.step)
    if handler is None:
        return "nothing-to-do"
    context = StepContext(sample_id=sample_id, token=token, worker=worker, loaded=sample)
    if not _start_lease(sample_id, token):
        return "stale-message"
    if sample.claims > settings.GEO_MAX_STEP_CLAIMS:
        return _park(context, reason=f"poison: step {sample.step} claimed {sample.claims} times")
    with keep_lease(sample_id=sample_id, token=token):
        return _guarded(context, sample, lambda: handler(context))


def _start_lease(sample_id: int, token: int) -> bool:
    """The lease runs from the claim; its message may have waited in the queue past it.
    Before any work, renew it if nobody swept or took it over meanwhile."""
    return renew_lease(
        sample_id=sample_id, token=token, lease_seconds=settings.GEO_LEASE_SECONDS, starting=True
    )


@contextmanager
def _fenced(ctx: StepContext, operation: str) -> Iterator[Sample]:
    """`sampling.transitions.fenced` for this step's sample, with the run and question read
    before the step attached to the locked row: both are frozen at launch, so the step does
    not read them again (the layers and the queue state come fresh from the locked row)."""
    with fenced(
        sample_id=ctx.sample_id, token=ctx.token, operation=operation, worker=ctx.worker
    ) as s:
        if ctx.loaded is not None:
            s.run = ctx.loaded.run
            s.question_revision = ctx.loaded.question_revision
        yield s


def _guarded(ctx: StepContext, sample: Sample, work: Callable[[], str]) -> str:
    try:
        return work()
    except StaleToken:
        log.warning("stale write refused sample=%s token=%s", ctx.sample_id, ctx.token)
        return "stale-write-refused"
    except DuplicateInFlight:
        return "duplicate-in-flight"
    except Exception:
        # A bug or an unexpected upstream shape: give the lease back with a backoff instead of
        # letting it run out; after GEO_MAX_STEP_CLAIMS tries the sample is parked with reason.
        log.exception("step %s failed sample=%s token=%s", sample.step, ctx.sample_id, ctx.token)
        return _retry_later(ctx, step=sample.step, delay=min(60.0, 2.0**sample.claims))


# --- batch submit -------------------------------------------------------------------------

_Begun = tuple[StepContext, Sample, Attempt]


def run_submit_batch(*, held: list[tuple[int, int]], worker: str = "") -> dict[int, str]:
    """Submit the due samples of one batch-accepting platform in one upstream call (the
    dispatcher groups them, up to the platform's submission limit). Each sample keeps its own
    attempt, idempotency key and fenced writes, and its own outcome: a batch may be accepted
    in part. A sample not due for a plain submit any more (stale message, poison cap) takes
    the single-sample path. Returns sample id -> what happened."""
    outcomes: dict[int, str] = {}
    begun: list[_Begun] = []
    for sample_id, token in held:
        sample = Sample.objects.filter(pk=sample_id).first()
        due = (
            sample is not None
            and sample.step == Step.SUBMIT
            and sample.fencing_token == token
            and sample.queue_state == QueueState.LEASED
            and sample.claims <= settings.GEO_MAX_STEP_CLAIMS
        )
        if not due or sample is None:
            outcomes[sample_id] = run_step(sample_id=sample_id, token=token, worker=worker)
            continue
        if not _start_lease(sample_id, token):
            outcomes[sample_id] = "stale-message"
            continue
        ctx = StepContext(sample_id=sample_id, token=token, worker=worker)
        outcome = _guarded(ctx, sample, partial(_begin_in_batch, ctx, begun))
        if outcome:
            outcomes[sample_id] = outcome
    if begun:
        with keep_leases([(ctx.sample_id, ctx.token) for ctx, _, _ in begun]):
            outcomes.update(_submit_together(begun))
    return outcomes


def _begin_in_batch(ctx: StepContext, begun: list[_Begun]) -> str:
    started = _begin_attempt(ctx)
    if started is None:
        return _not_begun(ctx)
    sample = Sample.objects.select_related("run", "question_revision").get(pk=ctx.sample_id)
    begun.append((ctx, sample, started[1]))
    return ""


def _submit_together(begun: list[_Begun]) -> dict[int, str]:
    connector = get_connector(begun[0][1].platform)
    requests = [_request_for(sample, attempt.idempotency_key) for _, sample, attempt in begun]
    results: list[SubmitOutcome | UpstreamError]
    _upstream_wait()
    try:
        results = connector.submit_batch(
            requests, attempt_no=min(attempt.attempt_no for _, _, attempt in begun)
        )
    except UpstreamError as error:  # the whole call failed: every task shares its fate
        results = [error] * len(begun)
    failpoint("after_accept_before_record")
    return {
        ctx.sample_id: _guarded(ctx, sample, partial(_record_task, ctx, sample, attempt, result))
        for (ctx, sample, attempt), result in zip(begun, results, strict=True)
    }


def _record_task(
    ctx: StepContext, sample: Sample, attempt: Attempt, result: SubmitOutcome | UpstreamError
) -> str:
    if isinstance(result, UpstreamError):
        return _record_submit_error(ctx, sample, attempt, result)
    return _record_accepted(ctx, attempt, result)


def _upstream_wait() -> None:
    """Before a call to an upstream (seconds of waiting, no database work): give the thread's
    database connection back to the worker's pool (settings.GEO_WORKER_DB_POOL), so threads
    waiting on upstreams hold none. Without a pool the connection is kept: closing it would
    cost a new PostgreSQL session per step. Never inside a transaction (no network I/O in one
    anyway)."""
    if getattr(connection, "pool", None) is not None and not connection.in_atomic_block:
        connection.close()


def keep_lease(*, sample_id: int, token: int) -> AbstractContextManager[None]:
    """Renew the lease in the background while a step works (long streams, slow uploads)."""
    return keep_leases([(sample_id, token)])


@contextmanager
def keep_leases(held: list[tuple[int, int]]) -> Iterator[None]:
    """Renew the leases of (sample id, token) pairs while one call works for all of them
    (a batch submit); a lease taken over is no longer renewed."""
    lease = settings.GEO_LEASE_SECONDS
    stop = threading.Event()

    def renew() -> None:
        live = list(held)
        try:
            while live and not stop.wait(lease / 3):
                live = [
                    (sample_id, token)
                    for sample_id, token in live
                    if renew_lease(sample_id=sample_id, token=token, lease_seconds=lease)
                ]
                _upstream_wait()
        finally:
            connection.close()

    thread = threading.Thread(target=renew, name=f"lease-{held[0][0]}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


# --- release helpers ----------------------------------------------------------------------


def _release(
    sample: Sample, *, step: str, delay: float = 0.0, state: str = QueueState.READY
) -> None:
    if step != sample.step:
        sample.claims = 0
    sample.step = step
    sample.queue_state = state if step != Step.NONE else QueueState.DONE
    sample.due_at = Now() + timedelta(seconds=delay)
    sample.lease_until = None
    sample.lease_owner = ""


_QUEUE_FIELDS = ("step", "queue_state", "due_at", "lease_until", "lease_owner", "claims")


def _seconds_since_first_attempt(sample: Sample) -> float:
    """The retry budget counts from the first attempt of this round (a resume starts a new
    one), in database time."""
    first = (
        sample.attempt_set.filter(attempt_no__gt=sample.attempts_before_resume)
        .order_by("attempt_no")
        .values_list("started_at", flat=True)
        .first()
    )
    return (db_now() - first).total_seconds() if first else 0.0


def _retry_policy() -> RetryPolicy:
    return RetryPolicy(max_attempts=settings.GEO_MAX_SUBMIT_ATTEMPTS)


def frozen_model(run: Run, platform: str) -> str | None:
    """The model the run froze for the platform at launch (None for runs launched before
    models were frozen: the connector's configured model)."""
    return run.config_snapshot.get("models", {}).get(platform)


def _request_for(sample: Sample, idempotency_key: str) -> SampleRequest:
    snapshot = sample.run.config_snapshot
    return SampleRequest(
        model=frozen_model(sample.run, sample.platform),
        sample_id=sample.pk,
        idempotency_key=idempotency_key,
        question=sample.question_revision.text,
        device=sample.device,
        region=sample.region,
        mode=sample.mode,
        screenshot=snapshot.get("screenshot_policy") != "none",
    )


# --- submit -------------------------------------------------------------------------------


def _begin_attempt(ctx: StepContext) -> tuple[Sample, Attempt] | None:
    """Persist the attempt and its idempotency key before calling the upstream."""
    with _fenced(ctx, "submit") as s:
        if s.submission_state == SubmissionState.SUBMITTING:
            latest = s.attempt_set.order_by("-attempt_no").first()
            if latest is not None and latest.fencing_token == ctx.token:
                # Another copy of this very message (same lease) is mid-call: it owns the
                # outcome. Touch nothing.
                raise DuplicateInFlight
            # A previous holder sent a request and vanished before recording the outcome:
            # the upstream may have accepted it. Verify before anything is sent again.
            s.mark_uncertain()
            _release(s, step=Step.VERIFY)
            save_fenced(s, ctx.token, "submission_state", *_QUEUE_FIELDS)
            return None
        if _run_cancelled(s.run_id):
            # Cancelled before the upstream was asked: never send it (billing released it).
            changed = end_uncollected(s, reason="cancelled by operator")
            _release(s, step=Step.NONE)
            save_fenced(s, ctx.token, *changed, *_QUEUE_FIELDS)
            return None
        s.attempts += 1
        attempt = Attempt(
            sample=s,
            attempt_no=s.attempts,
            idempotency_key=f"{s.run_id}:{s.pk}:{s.attempts}",
            fencing_token=ctx.token,
            model=frozen_model(s.run, s.platform) or "",
        )
        insert_rows([attempt])  # a plain INSERT (sampling/plainsql.py): once per submit
        s.begin_submit()
        save_fenced(s, ctx.token, "submission_state", "attempts")
    return s, attempt


_RUN_CANCELLED = f"SELECT 1 FROM {Run._meta.db_table} WHERE id = %s AND cancelled_at IS NOT NULL"


def _run_cancelled(run_id: UUID) -> bool:
    """Read fresh, not from the loaded run: cancelling is the one change a run sees mid-way.
    One plain statement per submit, without the ORM's compilation."""
    key = Run._meta.get_field("id").get_db_prep_value(run_id, connection)
    with connection.cursor() as cursor:
        cursor.execute(_RUN_CANCELLED, [key])
        return cursor.fetchone() is not None


def _not_begun(ctx: StepContext) -> str:
    """What `_begin_attempt` did instead of starting an attempt."""
    sample = Sample.objects.get(pk=ctx.sample_id)
    if sample.queue_state == QueueState.DONE:
        _after_terminal(sample)
        return "cancelled"
    return "uncertain"


def handle_submit(ctx: StepContext) -> str:
    begun = _begin_attempt(ctx)
    if begun is None:
        return _not_begun(ctx)
    sample, attempt = begun
    if ctx.loaded is None:  # not entered through run_step: read the relations the call needs
        sample = Sample.objects.select_related("run", "question_revision").get(pk=sample.pk)
    connector = get_connector(sample.platform)
    _upstream_wait()
    try:
        outcome = inputs.upstream_outcome(
            connector.submit(
                _request_for(sample, attempt.idempotency_key), attempt_no=attempt.attempt_no
            )
        )
    except UpstreamError as error:
        _price_attempt(attempt, error.raw)
        return _record_submit_error(ctx, sample, attempt, error)
    failpoint("after_accept_before_record")
    if outcome.result is None:
        return _record_accepted(ctx, attempt, outcome)
    _price_attempt(attempt, outcome.result.raw)
    return _record_direct_answer(ctx, sample, attempt, outcome)


def _price_attempt(attempt: Attempt, raw: bytes | None) -> None:
    """A direct API bills the tokens of every attempt, answered or not: its usage x its
    model's price goes on the attempt (saved with its outcome), then into the ledger."""
    usage = extract_usage(raw) if raw else None
    if usage is not None:
        apply_cost(attempt, price_usage(model=attempt.model, usage=usage))


def _close_attempt(
    attempt: Attempt,
    *,
    status: str,
    error: UpstreamError | None = None,
    outcome: SubmitOutcome | None = None,
) -> None:
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
    update_row(attempt, _ATTEMPT_FIELDS)  # as attempt.save(), in a plain UPDATE
    if attempt.cost:
        # Queued in the fenced write that records the outcome; booked by the dispatcher's next
        # tick, and the run's end books any that were missed.
        queue_attempt_cost(run_id=attempt.sample.run_id, attempt_id=attempt.pk)


_ATTEMPT_FIELDS = tuple(f.name for f in Attempt._meta.concrete_fields if not f.primary_key)


def _error_capture(sample: Sample, error: UpstreamError) -> evidence_services.ArchivedResult | None:
    """What the upstream sent with its error (an error body, earlier rounds of a tool loop) is
    evidence too: archived as a failed capture revision, so nothing received is lost."""
    if not error.raw:
        return None
    result = NormalizedResult(
        sample_id=sample.pk,
        upstream_id=None,
        collection_state=CollectionState.FAILED,
        evidence_state="failed",
        answer_text="",
        raw=error.raw,
        raw_mime="application/octet-stream",
        status_code=error.status_code,
        error={"class": error.error_class.value, "message": error.message},
        request_id=error.request_id,
    )
    return _archive(sample, result)


def _record_submit_error(
    ctx: StepContext, sample: Sample, attempt: Attempt, error: UpstreamError
) -> str:
    archived = _error_capture(sample, error)  # `sample` was loaded with its run for the call
    with _fenced(ctx, "submit") as s:
        if archived is not None:
            evidence_services.record_capture(
                sample=s, attempt_no=attempt.attempt_no, archived=archived, token=ctx.token
            )
        if error.error_class == ErrorClass.ACCEPTANCE_UNKNOWN:
            _close_attempt(attempt, status=AttemptStatus.UNKNOWN, error=error)
            s.mark_uncertain()
            _release(s, step=Step.VERIFY)
            save_fenced(s, ctx.token, "submission_state", *_QUEUE_FIELDS)
            return "uncertain"
        _close_attempt(attempt, status=AttemptStatus.FAILED, error=error)
        s.reject_submit()
        return _retry_or_fail(ctx, s, error, attempt_no=attempt.attempt_no, message=error.message)


def _record_accepted(ctx: StepContext, attempt: Attempt, outcome: SubmitOutcome) -> str:
    with _fenced(ctx, "accept") as s:
        _close_attempt(attempt, status=AttemptStatus.ACCEPTED, outcome=outcome)
        s.accept()
        s.upstream_id = outcome.upstream_id
        s.accepted_at = Now()
        _release(s, step=Step.POLL, delay=POLL_MIN_SECONDS)
        save_fenced(s, ctx.token, "submission_state", "upstream_id", "accepted_at", *_QUEUE_FIELDS)
    return "accepted"


def _record_direct_answer(
    ctx: StepContext, sample: Sample, attempt: Attempt, outcome: SubmitOutcome
) -> str:
    """A direct model API answered in the submit call itself."""
    result = outcome.result
    assert result is not None
    archived = _archive(sample, result)
    failed = result.collection_state != CollectionState.COMPLETED
    # An answer the parser did not understand was still an answer: the attempt was accepted.
    unparsed = failed and _error_class(result) == ErrorClass.PARSE_FAILED
    ahead = None if failed or _wants_rendered_screenshot(sample) else _analyse_ahead(sample, result)
    failpoint("after_store_before_complete")
    with _fenced(ctx, "answer") as s:
        _close_attempt(
            attempt,
            outcome=outcome,
            status=AttemptStatus.FAILED if failed and not unparsed else AttemptStatus.ACCEPTED,
        )
        capture = evidence_services.record_capture(
            sample=s, attempt_no=attempt.attempt_no, archived=archived, token=ctx.token
        )
        if unparsed:
            return _hold_unparsed(ctx, s, outcome.upstream_id, message=_error_message(result))
        if failed:
            return _answer_failed(ctx, s, attempt, result)
        s.accept()
        s.upstream_id = outcome.upstream_id
        s.accepted_at = Now()
        s.start_collection()
        s.complete_collection()
        s.completed_at = Now()
        analysed: tuple[str, ...] = ()
        if _wants_rendered_screenshot(s):
            # The page is photographed on the evidence queue, so screenshots never hold an
            # answer-collection slot; evidence stays pending until then.
            _release(s, step=Step.EVIDENCE)
        else:
            _set_evidence_state(s, result)
            analysed = _analysed_now(s, ahead, capture)
        save_fenced(
            s,
            ctx.token,
            "submission_state",
            "collection_state",
            "evidence_state",
            "evidence_reason",
            "upstream_id",
            "accepted_at",
            "completed_at",
            *analysed,
            *_QUEUE_FIELDS,
        )
    return "answered"


def _analyse_ahead(sample: Sample, result: NormalizedResult) -> AnalysisAhead | None:
    """The analysis of an answer just collected, derived before the fenced write that records
    it (`_analysed_now`), when it is local and cheap (analysis.services.analyse_ahead); None
    sends the sample to the analysis queue as before. `sample` carries its run."""
    if not settings.GEO_ANALYSE_INLINE:
        return None
    try:
        return analyse_ahead(
            sample=sample, answer_text=result.answer_text, collection_state=result.collection_state
        )
    except Exception:  # the analysis step will try again on its own, with its retries
        log.exception("inline analysis failed sample=%s; queued for analysis", sample.pk)
        return None


def _analysed_now(s: Sample, ahead: AnalysisAhead | None, capture: Capture) -> tuple[str, ...]:
    """Inside the fenced write that stored the answer's capture: apply the analysis derived
    ahead and end the sample, as the analysis step would (`handle_analyse`); without one,
    release the sample to the analysis queue. Returns the extra fields to save."""
    if ahead is None:
        _release(s, step=Step.ANALYSE)
        return ()
    verdict = ahead.verdict_for(capture)
    verdict.apply(s)
    _release(s, step=Step.NONE)
    if verdict.valid:
        billing.queue_capture(run_id=s.run_id, sample_id=s.pk)
    _after_terminal(s)
    return ("analysis_state", "validity", "validity_reason")


def _error_class(result: NormalizedResult) -> ErrorClass:
    return ErrorClass((result.error or {}).get("class", ErrorClass.TRUNCATED))


def _error_message(result: NormalizedResult, default: str = "") -> str:
    return str((result.error or {}).get("message", default))


def _hold_unparsed(ctx: StepContext, s: Sample, upstream_id: str | None, *, message: str) -> str:
    """The upstream answered in a format the parser does not understand: the raw is already
    archived; the sample goes to the analyst review queue with the parser's error and is never
    asked again automatically. Call inside the fenced block."""
    if s.submission_state == SubmissionState.SUBMITTING:
        s.accept()
        s.accepted_at = Now()
    s.upstream_id = upstream_id or s.upstream_id
    changed = hold_unparsed(s, error=message or "format not understood")
    _release(s, step=Step.NONE)
    save_fenced(
        s, ctx.token, "submission_state", "accepted_at", "upstream_id", *changed, *_QUEUE_FIELDS
    )
    _after_terminal(s)
    return "parse-failed:review"


def _answer_failed(ctx: StepContext, s: Sample, attempt: Attempt, result: NormalizedResult) -> str:
    """Truncated stream or mid-stream error: the raw is kept (already archived); the question
    is asked again as a new attempt while the retry budget lasts."""
    error_class = _error_class(result)
    attempt.error_class = error_class.value
    attempt.error_message = _error_message(result)[:2000]
    attempt.save(update_fields=["error_class", "error_message"])
    # No usable answer came back, so the question counts as not yet asked: a new attempt may
    # ask it again. The raw of this attempt is already archived as its own capture revision.
    s.reject_submit()
    return _retry_or_fail(
        ctx, s, error_class, attempt_no=attempt.attempt_no, message=attempt.error_message
    )


_RETRYABLE = frozenset(
    {ErrorClass.RATE_LIMITED, ErrorClass.TRANSIENT, ErrorClass.TRUNCATED, ErrorClass.LOST}
)


def _retry_or_fail(
    ctx: StepContext,
    s: Sample,
    error: UpstreamError | ErrorClass,
    *,
    attempt_no: int,
    message: str,
) -> str:
    """After a failed attempt (submission back at `planned`): ask again later if the retry
    policy allows, otherwise the collection fails for good. Call inside the fenced block."""
    error_class = error.error_class if isinstance(error, UpstreamError) else error
    decision = _retry_policy().decide(
        error,
        attempt_no=attempt_no - s.attempts_before_resume,  # the attempts of this round
        elapsed_seconds=_seconds_since_first_attempt(s),
        rng=random.Random(),
    )
    if decision.retry:
        _release(s, step=Step.SUBMIT, delay=decision.delay_seconds)
        save_fenced(s, ctx.token, "submission_state", *_QUEUE_FIELDS)
        return f"retry:{error_class.value}"
    reason = f"{error_class.value}: {message}"
    if error_class in _RETRYABLE:  # it gave up on a retryable error: say why (budget, attempts)
        reason = f"{reason} ({decision.reason})"
    changed = end_uncollected(s, reason=reason)
    _release(s, step=Step.NONE)
    save_fenced(s, ctx.token, "submission_state", *changed, *_QUEUE_FIELDS)
    _after_terminal(s)
    return f"failed:{error_class.value}"


def _archive(sample: Sample, result: NormalizedResult) -> evidence_services.ArchivedResult:
    return evidence_services.archive_objects(
        result=result,
        tenant=sample.run.config_snapshot["tenant"],
        run_id=str(sample.run_id),
        sample_id=sample.pk,
        revision=evidence_services.next_revision(sample_id=sample.pk),
    )


def _set_evidence_state(s: Sample, result: NormalizedResult) -> None:
    wanted_screenshot = s.run.config_snapshot.get("screenshot_policy") != "none"
    has_screenshot = any(a.kind == "screenshot" for a in result.attachments)
    missing = [w for w in result.warnings if w.endswith("_UNAVAILABLE")]
    if result.evidence_state == "partial" or missing:
        s.store_partial_evidence()
        s.evidence_reason = ", ".join(missing) or "partial evidence"
    elif (
        wanted_screenshot
        and not has_screenshot
        and get_connector(s.platform).capabilities().screenshots
    ):
        s.store_partial_evidence()
        s.evidence_reason = "SCREENSHOT_UNAVAILABLE"
    else:
        s.store_evidence()


# --- verify (uncertain acceptance) --------------------------------------------------------


def handle_verify(ctx: StepContext) -> str:
    sample = Sample.objects.get(pk=ctx.sample_id)
    attempt = sample.attempt_set.order_by("-attempt_no").first()
    if attempt is None:
        raise RuntimeError(f"sample {sample.pk} is uncertain without an attempt")
    _upstream_wait()
    try:
        upstream_id = get_connector(sample.platform).lookup(attempt.idempotency_key)
    except UpstreamError as error:
        if error.error_class == ErrorClass.UNSUPPORTED:
            return _park(ctx, reason="uncertain: platform cannot confirm acceptance; needs review")
        return _retry_later(ctx, step=Step.VERIFY, delay=5.0)
    with _fenced(ctx, "verify") as s:
        if upstream_id:
            attempt.status = AttemptStatus.ACCEPTED
            attempt.upstream_id = upstream_id
            attempt.save(update_fields=["status", "upstream_id"])
            s.confirm_accepted()
            s.upstream_id = upstream_id
            s.accepted_at = Now()
            _release(s, step=Step.POLL)
            save_fenced(
                s, ctx.token, "submission_state", "upstream_id", "accepted_at", *_QUEUE_FIELDS
            )
            return "verified-accepted"
        attempt.status = AttemptStatus.FAILED
        attempt.error_message = "upstream has no task for this idempotency key"
        attempt.save(update_fields=["status", "error_message"])
        s.confirm_not_accepted()
        _release(s, step=Step.SUBMIT)
        save_fenced(s, ctx.token, "submission_state", *_QUEUE_FIELDS)
    return "verified-not-accepted"


def _park(ctx: StepContext, *, reason: str) -> str:
    """Stop automatic work on the sample; a person decides. It stays in every denominator
    as pending, so the run cannot look finished while it waits."""
    with _fenced(ctx, "park") as s:
        step = s.step
        if s.submission_state == SubmissionState.SUBMITTING:
            # A request may have gone out: parked as uncertain, so it is shown and resolved
            # as such, never re-sent blindly.
            s.mark_uncertain()
            step = Step.VERIFY
        s.failure_reason = reason[:200]
        _release(s, step=step, state=QueueState.PARKED)
        save_fenced(s, ctx.token, "submission_state", "failure_reason", *_QUEUE_FIELDS)
    return "parked"


def _retry_later(ctx: StepContext, *, step: str, delay: float) -> str:
    with _fenced(ctx, step) as s:
        _release(s, step=step, delay=delay)
        save_fenced(s, ctx.token, *_QUEUE_FIELDS)
    return f"retry-later:{step}"


# --- poll ---------------------------------------------------------------------------------


def _poll_delay(sample: Sample) -> float:
    age = (db_now() - sample.accepted_at).total_seconds() if sample.accepted_at else 0.0
    return max(POLL_MIN_SECONDS, min(POLL_MAX_SECONDS, age / 10))


def handle_poll(ctx: StepContext) -> str:
    sample = Sample.objects.get(pk=ctx.sample_id)
    _upstream_wait()
    try:
        polled = get_connector(sample.platform).poll(sample.upstream_id)
    except UpstreamError as error:
        if sample.claims >= settings.GEO_MAX_STEP_CLAIMS:  # give up, with the reason
            return _fail_accepted(ctx, reason=f"poll failed {sample.claims} times: {error}")
        # Keep the upstream id and keep polling, later.
        return _retry_later(ctx, step=Step.POLL, delay=error.retry_after or _poll_delay(sample))
    with _fenced(ctx, "poll") as s:
        if (
            polled.state in ("running", "completed")
            and s.collection_state == CollectionState.QUEUED
        ):
            s.start_collection()
        if polled.state in ("queued", "running"):
            _release(s, step=Step.POLL, delay=polled.retry_after or _poll_delay(s))
            s.claims = 0
            save_fenced(s, ctx.token, "collection_state", *_QUEUE_FIELDS)
            return f"poll:{polled.state}"
        if polled.state == "completed":
            _release(s, step=Step.EVIDENCE)
            save_fenced(s, ctx.token, "collection_state", *_QUEUE_FIELDS)
            return "poll:completed"
    return _fail_accepted(ctx, reason=f"upstream reports {polled.state}: {polled.message or ''}")


def _fail_accepted(ctx: StepContext, *, reason: str) -> str:
    with _fenced(ctx, "fail") as s:
        changed = end_uncollected(s, reason=reason)
        _release(s, step=Step.NONE)
        save_fenced(s, ctx.token, *changed, *_QUEUE_FIELDS)
    _after_terminal(s)
    return "failed"


# --- evidence -----------------------------------------------------------------------------


def _wants_rendered_screenshot(sample: Sample) -> bool:
    """Direct model APIs have no screen to capture: when the campaign asks for screenshots we
    render an evidence page of the captured answer and photograph it."""
    if sample.run.config_snapshot.get("screenshot_policy") == "none":
        return False
    capabilities = get_connector(sample.platform).capabilities()
    return not capabilities.asynchronous and not capabilities.screenshots


def _render_screenshot(ctx: StepContext, sample: Sample) -> str:
    capture = (
        Capture.objects.filter(sample_id=sample.pk, collection_state=CollectionState.COMPLETED)
        .order_by("-revision")
        .first()
    )
    reason = ""
    if capture is None:
        reason = "SCREENSHOT_UNAVAILABLE: no completed capture to render"
    else:
        try:
            png = render_answer_page(capture_id=capture.pk)
            evidence_services.store_screenshot(sample_id=sample.pk, capture_id=capture.pk, png=png)
        except ScreenshotUnavailable as unavailable:
            reason = unavailable.reason[:200]
        except evidence_services.EvidenceExists:
            pass  # an earlier holder of this step stored it; never replaced
    with _fenced(ctx, "screenshot") as s:
        if reason:
            s.store_partial_evidence()  # the answer still counts; the report shows why
            s.evidence_reason = reason
        else:
            s.store_evidence()
        _release(s, step=Step.ANALYSE)
        save_fenced(s, ctx.token, "evidence_state", "evidence_reason", *_QUEUE_FIELDS)
    return "screenshot-partial" if reason else "screenshot-stored"


def handle_evidence(ctx: StepContext) -> str:
    sample = Sample.objects.select_related("run").get(pk=ctx.sample_id)
    if not get_connector(sample.platform).capabilities().asynchronous:
        return _render_screenshot(ctx, sample)
    _upstream_wait()
    try:
        result = inputs.upstream_result(
            get_connector(sample.platform).fetch_evidence(sample.upstream_id, sample_id=sample.pk)
        )
    except UpstreamError as error:
        if sample.claims >= settings.GEO_MAX_STEP_CLAIMS:  # give up, with the reason
            return _fail_accepted(ctx, reason=f"evidence fetch failed: {error}")
        return _retry_later(ctx, step=Step.EVIDENCE, delay=error.retry_after or 2.0)
    archived = _archive(sample, result)
    completed = result.collection_state == CollectionState.COMPLETED
    ahead = _analyse_ahead(sample, result) if completed else None
    failpoint("after_store_before_complete")
    with _fenced(ctx, "evidence") as s:
        capture = evidence_services.record_capture(
            sample=s, attempt_no=s.attempts, archived=archived, token=ctx.token
        )
        if result.collection_state != CollectionState.COMPLETED and (
            _error_class(result) == ErrorClass.PARSE_FAILED
        ):
            return _hold_unparsed(ctx, s, None, message=_error_message(result))
        if result.collection_state != CollectionState.COMPLETED:
            message = _error_message(result, "collection failed")
            changed = end_uncollected(s, reason=message)
            _release(s, step=Step.NONE)
            save_fenced(s, ctx.token, *changed, *_QUEUE_FIELDS)
            terminal = True
        else:
            if s.collection_state == CollectionState.QUEUED:
                s.start_collection()
            s.complete_collection()
            s.completed_at = Now()
            _set_evidence_state(s, result)
            analysed = _analysed_now(s, ahead, capture)
            save_fenced(
                s,
                ctx.token,
                "collection_state",
                "evidence_state",
                "evidence_reason",
                "completed_at",
                *analysed,
                *_QUEUE_FIELDS,
            )
            terminal = False
    if capture.upstream_cost is not None:
        billing.record_upstream_cost(capture_id=capture.pk)  # idempotent per task
    if terminal:
        _after_terminal(s)
    return "evidence-stored"


# --- analyse ------------------------------------------------------------------------------


def handle_analyse(ctx: StepContext) -> str:
    verdict = analyse_sample(sample_id=ctx.sample_id)
    with _fenced(ctx, "analyse") as s:
        verdict.apply(s)
        _release(s, step=Step.NONE)
        save_fenced(s, ctx.token, "analysis_state", "validity", "validity_reason", *_QUEUE_FIELDS)
        if verdict.valid:
            # Posted with the run's other charges by the dispatcher's next tick, or when the
            # run finishes (docs/decisions.md, settlement off the hot account rows).
            billing.queue_capture(run_id=s.run_id, sample_id=s.pk)
    _after_terminal(s)
    return f"analysed:{s.analysis_state}"


def _after_terminal(sample: Sample) -> None:
    """After the commit that ended this sample, see whether its run has ended. Checked after
    commit: two last samples ending at once in two transactions would each still see the
    other as running. (The dispatcher's sweep catches a process that dies in between.)"""
    run_id = sample.run_id
    transaction.on_commit(lambda: finish_run_if_done(run_id=run_id))


_HANDLERS: dict[str, Callable[[StepContext], str]] = {
    Step.SUBMIT: handle_submit,
    Step.VERIFY: handle_verify,
    Step.POLL: handle_poll,
    Step.EVIDENCE: handle_evidence,
    Step.ANALYSE: handle_analyse,
}
