"""The submit step: record the attempt, ask the upstream (alone or in a batch), record what
it answered. A direct model API answers in the call itself (collected, and analysed inline
when the analyser is local); an asynchronous one accepts a task to poll.
"""

from __future__ import annotations

import logging
import random
import time
from functools import partial
from uuid import UUID

from django.db import InterfaceError, OperationalError, connection
from django.db.models import Count, Min, Model, Q

from analysis.services import AnalysisAhead
from billing.costs import apply_cost, pending_attempt_cost, price_usage, queue_attempt_cost
from connectors.base import ErrorClass, NormalizedResult, SubmitOutcome, UpstreamError
from connectors.retry import REVIEW, VERIFY, RetryDecision
from connectors.usage import extract_usage
from evidence import services as evidence_services
from geo_collect.failpoints import failpoint
from pipeline.step_context import (
    DuplicateInFlight,
    StepContext,
    analyse_inline,
    answer_work,
    archive,
    charge_rows,
    connector,
    error_class_of,
    error_message_of,
    evidence_of,
    frozen_model,
    guarded,
    locked_step,
    outside_answer_work,
    queue_charge,
    request_for,
    retry_policy,
    store_unavailable,
    unlocked_step,
    upstream_call,
    verdict_for,
    wants_rendered_screenshot,
)
from sampling import inbox, inputs, plainsql
from sampling.dbtime import db_now
from sampling.models import (
    AnswerInbox,
    Attempt,
    AttemptStatus,
    CollectionState,
    Run,
    Sample,
    Step,
    SubmissionState,
)
from sampling.steps import SampleStep, begin_attempt_at_once

log = logging.getLogger("pipeline.execution")

# --- batch submit -------------------------------------------------------------------------


Begun = tuple[StepContext, Sample, Attempt]


def begin_in_batch(ctx: StepContext, begun: list[Begun]) -> str:
    started = _begin_attempt(ctx)
    if isinstance(started, str):
        return started
    begun.append((ctx, *started))
    return ""


def submit_together(begun: list[Begun]) -> dict[int, str]:
    platform = begun[0][1].platform
    upstream = connector(platform)
    requests = [request_for(sample, attempt.idempotency_key) for _, sample, attempt in begun]
    attempt_no = min(attempt.attempt_no for _, _, attempt in begun)
    results: list[SubmitOutcome | UpstreamError]
    try:
        results = upstream_call(
            platform, lambda: upstream.submit_batch(requests, attempt_no=attempt_no)
        )
    except UpstreamError as error:  # the whole call failed: every task shares its fate
        results = [error] * len(begun)
    failpoint("after_accept_before_record")
    return {
        ctx.sample_id: guarded(ctx, sample, partial(_record_task, ctx, sample, attempt, result))
        for (ctx, sample, attempt), result in zip(begun, results, strict=True)
    }


def _record_task(
    ctx: StepContext, sample: Sample, attempt: Attempt, result: SubmitOutcome | UpstreamError
) -> str:
    if isinstance(result, UpstreamError):
        return _record_submit_error(ctx, sample, attempt, result)
    return _record_accepted(ctx, attempt, result)


# --- submit -------------------------------------------------------------------------------


def _begin_attempt(ctx: StepContext) -> tuple[Sample, Attempt] | str:
    """Persist the attempt and its idempotency key before calling the upstream; or what was
    done instead (the sample is uncertain, or its run cancelled). Usually one statement
    (`begin_attempt_at_once`); the locked path finds out what else to do."""
    loaded = ctx.loaded
    if loaded is not None:
        model = frozen_model(loaded.run, loaded.platform) or ""
        attempt = begin_attempt_at_once(loaded, token=ctx.token, model=model)
        if attempt is not None:
            return loaded, attempt
    with locked_step(ctx, "submit") as step:
        s = step.sample
        if s.submission_state == SubmissionState.SUBMITTING:
            latest = s.attempt_set.order_by("-attempt_no").first()
            if latest is not None and latest.fencing_token == ctx.token:
                # Another copy of this very message (same lease) is mid-call: it owns the
                # outcome. Touch nothing.
                raise DuplicateInFlight
            # A previous holder sent a request and vanished before recording the outcome:
            # the upstream may have accepted it. Verify before anything is sent again.
            return step.uncertain()
        if _run_cancelled(s.run_id):
            # Cancelled before the upstream was asked: never send it (billing released it).
            return step.cancelled()
        return s, step.attempt_started(model=frozen_model(s.run, s.platform) or "")


_RUN_CANCELLED = f"SELECT 1 FROM {Run._meta.db_table} WHERE id = %s AND cancelled_at IS NOT NULL"


def _run_cancelled(run_id: UUID) -> bool:
    """Read fresh, not from the loaded run: cancelling is the one change a run sees mid-way.
    One plain statement per submit, without the ORM's compilation."""
    key = Run._meta.get_field("id").get_db_prep_value(run_id, connection)
    with plainsql.cursor() as cursor:  # prepared: once per submit
        cursor.execute(_RUN_CANCELLED, [key])
        return cursor.fetchone() is not None


def handle_submit(ctx: StepContext, loaded: Sample) -> str:
    begun = _begin_attempt(ctx)
    if isinstance(begun, str):
        return begun
    sample, attempt = begun
    upstream = connector(sample.platform)
    request = request_for(sample, attempt.idempotency_key)
    try:
        outcome = inputs.upstream_outcome(
            upstream_call(
                sample.platform, lambda: upstream.submit(request, attempt_no=attempt.attempt_no)
            )
        )
    except UpstreamError as error:
        _price_attempt(attempt, error.raw)
        return _record_submit_error(ctx, sample, attempt, error)
    failpoint("after_accept_before_record")
    if outcome.result is None:
        return _record_accepted(ctx, attempt, outcome)
    with answer_work():
        _price_attempt(attempt, outcome.result.raw)
        entry = _keep_answer(ctx, sample, attempt, outcome)
        failpoint("after_inbox_before_archive")
        return _archive_answer(ctx, sample, attempt, entry, outcome.result)


def _price_attempt(attempt: Attempt, raw: bytes | None) -> None:
    """A direct API bills the tokens of every attempt, answered or not: its usage x its
    model's price goes on the attempt (saved with its outcome), then into the ledger."""
    usage = extract_usage(raw) if raw else None
    if usage is not None:
        apply_cost(attempt, price_usage(model=attempt.model, usage=usage))


def _queue_cost(attempt: Attempt) -> None:
    """Queued in the fenced write that records the attempt's outcome; booked by the
    dispatcher's next tick, and the run's end books any that were missed."""
    if _cost_rows(attempt):
        queue_attempt_cost(run_id=attempt.sample.run_id, attempt_id=attempt.pk)


def _cost_rows(attempt: Attempt) -> list[Model]:
    """`_queue_cost`'s row, not yet written (for a write in one statement; skip it on
    conflict): none for an attempt without a cost."""
    if not attempt.cost:
        return []
    return [pending_attempt_cost(run_id=attempt.sample.run_id, attempt_id=attempt.pk)]


def _submit_decision(
    sample: Sample, error: UpstreamError | ErrorClass, attempt_no: int
) -> RetryDecision:
    """What the policy says after a failed attempt, counting the attempts and time of this
    round (a resume starts a new one), in database time."""
    # One statement: when the round began, and how many of its attempts (before this one,
    # whose outcome is written after the decision) reached no platform.
    unreachable = Q(error_class=ErrorClass.UNREACHABLE.value) & ~Q(attempt_no=attempt_no)
    counted = sample.attempt_set.filter(attempt_no__gt=sample.attempts_before_resume).aggregate(
        first=Min("started_at"), unreachable=Count("pk", filter=unreachable)
    )
    return retry_policy().decide(
        error,
        attempt_no=attempt_no - sample.attempts_before_resume,
        elapsed_seconds=(db_now() - counted["first"]).total_seconds() if counted["first"] else 0.0,
        rng=random.Random(),
        unreachable_before=counted["unreachable"] or 0,
    )


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
    return archive(sample, result)


def _record_submit_error(
    ctx: StepContext, sample: Sample, attempt: Attempt, error: UpstreamError
) -> str:
    try:
        archived = _error_capture(sample, error)  # `sample` was loaded with its run for the call
    except Exception as failure:
        if not store_unavailable(failure):
            raise
        # The attempt's outcome is what must not be lost (its status, its cost, the decision):
        # an error body the store cannot take now is left out, and said so.
        log.warning("error body of sample %s not archived: %s", sample.pk, failure)
        archived = None
    with locked_step(ctx, "submit") as step:
        if archived is not None:
            evidence_services.record_capture(
                sample=step.sample,
                attempt_no=attempt.attempt_no,
                archived=archived,
                token=ctx.token,
            )
        decision = _submit_decision(step.sample, error, attempt.attempt_no)
        unknown = decision.action == VERIFY
        step.close_attempt(
            attempt, status=AttemptStatus.UNKNOWN if unknown else AttemptStatus.FAILED, error=error
        )
        _queue_cost(attempt)
        if unknown:
            return step.uncertain()
        return step.submit_failed(decision, error_class=error.error_class, message=error.message)


def _record_accepted(ctx: StepContext, attempt: Attempt, outcome: SubmitOutcome) -> str:
    with locked_step(ctx, "accept") as step:
        step.close_attempt(attempt, status=AttemptStatus.ACCEPTED, outcome=outcome)
        _queue_cost(attempt)
        first_poll = retry_policy().poll_delay(age_seconds=0.0)
        return step.accepted(upstream_id=outcome.upstream_id, poll_in=first_poll)


# --- a direct answer: kept, then archived ------------------------------------------------


def _keep_answer(
    ctx: StepContext, sample: Sample, attempt: Attempt, outcome: SubmitOutcome
) -> AnswerInbox:
    """The answer just read, kept in the database before anything else can fail: one fenced
    write of the inbox row, the attempt's outcome and cost, and the sample's move to
    `archive`. A database failure here is retried in the worker with the answer in hand
    (`RetryPolicy.after_inbox_write_error`); only past that is the answer lost, as with a
    worker that dies holding it (the next claim verifies)."""
    policy, tries, started = retry_policy(), 0, time.monotonic()
    seen = plainsql.remembered(attempt)
    while True:
        try:
            return _keep_at_once(ctx, sample, attempt, outcome) or _write_inbox(
                ctx, attempt, outcome
            )
        except (OperationalError, InterfaceError) as error:
            plainsql.restore(attempt, seen)  # the rolled-back write is written again in full
            tries += 1
            elapsed = time.monotonic() - started  # a duration in this worker, not a record
            decision = policy.after_inbox_write_error(tries=tries, elapsed_seconds=elapsed)
            log.warning("keeping the answer of sample %s failed: %s", ctx.sample_id, error)
            if not decision.retry:
                raise
            if not connection.in_atomic_block:
                connection.close()  # a broken connection is never used again
            time.sleep(decision.delay_seconds)


def _keep_at_once(
    ctx: StepContext, sample: Sample, attempt: Attempt, outcome: SubmitOutcome
) -> AnswerInbox | None:
    """`_write_inbox` in one statement (`SampleStep.write_at_once`): the sample, the attempt,
    its cost's queue row and the inbox row, if the sample is as the submit left it. None:
    nothing written; the locked path runs."""
    step = unlocked_step(ctx, sample)
    if step is None:
        return None
    failpoint("inbox_write_fails")  # a failure of the write: nothing of it is stored
    result = _close_answered(step, attempt, outcome)
    entry = inbox.entry_for(attempt=attempt, result=result, upstream_id=outcome.upstream_id)
    cost = _cost_rows(attempt)
    if not step.write_at_once(then_insert=[entry, *cost], skip_conflicts=cost):
        return None
    return entry


def _write_inbox(ctx: StepContext, attempt: Attempt, outcome: SubmitOutcome) -> AnswerInbox:
    with locked_step(ctx, "answer") as step:
        result = _close_answered(step, attempt, outcome)
        _queue_cost(attempt)
        # Past the attempt's and the sample's writes: a failure here rolls them back too.
        failpoint("inbox_write_fails")
        return inbox.keep(attempt=attempt, result=result, upstream_id=outcome.upstream_id)


def _close_answered(step: SampleStep, attempt: Attempt, outcome: SubmitOutcome) -> NormalizedResult:
    """The attempt closed by the answer read, and the sample moved to `archive`
    (`answer_kept`). Returns the answer."""
    result = outcome.result
    assert result is not None
    failed = result.collection_state != CollectionState.COMPLETED
    # An answer the parser did not understand was still an answer: the attempt was accepted.
    unparsed = failed and error_class_of(result) == ErrorClass.PARSE_FAILED
    if failed and not unparsed:  # truncated, or an error mid-stream: asked again
        step.close_attempt(
            attempt,
            status=AttemptStatus.FAILED,
            outcome=outcome,
            error_class=error_class_of(result).value,
            error_message=error_message_of(result),
        )
    else:
        step.close_attempt(attempt, status=AttemptStatus.ACCEPTED, outcome=outcome)
    step.answer_kept(upstream_id=outcome.upstream_id, answered=not failed or unparsed)
    return result


def handle_archive(ctx: StepContext, loaded: Sample) -> str:
    """The archive step claimed on its own: the worker that kept the answer died, or the
    evidence store refused. The answer comes from the inbox; the upstream is not asked."""
    entry = inbox.kept_answer(sample_id=loaded.pk)
    if entry is None:
        raise RuntimeError(f"sample {loaded.pk} is at the archive step without a kept answer")
    attempt = Attempt.objects.get(pk=entry.attempt_id)
    with answer_work():
        return _archive_answer(ctx, loaded, attempt, entry, inbox.result_of(entry))


def _archive_answer(
    ctx: StepContext,
    sample: Sample,
    attempt: Attempt,
    entry: AnswerInbox,
    result: NormalizedResult,
) -> str:
    """The kept answer to the evidence store, then its capture, analysis and outcome in one
    fenced write that consumes the inbox row. A failure before that write is the archive
    step's to retry (`RetryPolicy.after_archive_error`), never a submit's."""
    try:
        with outside_answer_work():  # uploads: a wait, not work
            archived = archive(sample, result)
    except Exception as error:
        return _archive_failed(ctx, entry, error)
    failed = result.collection_state != CollectionState.COMPLETED
    unparsed = failed and error_class_of(result) == ErrorClass.PARSE_FAILED
    rendered = wants_rendered_screenshot(sample)
    ahead = None if failed or rendered else analyse_inline(sample, result)
    failpoint("after_store_before_complete")
    if not failed and not rendered:
        answered = _answered_at_once(ctx, sample, attempt, entry, archived, ahead)
        if answered is not None:
            return answered
    with locked_step(ctx, "archive") as step:
        capture = evidence_services.record_capture(
            sample=step.sample,
            attempt_no=attempt.attempt_no,
            archived=archived,
            token=ctx.token,
            captured_at=entry.received_at,
        )
        inbox.consumed(entry)
        if unparsed:
            return step.hold_unparsed(upstream_id=entry.upstream_id, error=error_message_of(result))
        if failed:
            # The raw of this attempt is archived as its own capture revision.
            decision = _submit_decision(step.sample, error_class_of(result), attempt.attempt_no)
            return step.submit_failed(
                decision, error_class=error_class_of(result), message=error_message_of(result)
            )
        if rendered:
            # The page is photographed on the evidence queue, so screenshots never hold an
            # answer-collection slot; evidence stays pending until then.
            return step.answered(upstream_id=entry.upstream_id, evidence=None, verdict=None)
        verdict = verdict_for(ahead, capture)
        answered = step.answered(
            upstream_id=entry.upstream_id,
            evidence=evidence_of(step.sample, result),
            verdict=verdict,
        )
        queue_charge(step.sample, verdict)
    return answered


def _answered_at_once(
    ctx: StepContext,
    sample: Sample,
    attempt: Attempt,
    entry: AnswerInbox,
    archived: evidence_services.ArchivedResult,
    ahead: AnalysisAhead | None,
) -> str | None:
    """`_archive_answer`'s answered outcome in one statement (`SampleStep.write_at_once`): the
    capture with its objects, citations and searches, the analysis, the charge's queue row,
    the inbox row's delete and the sample's move, if the sample is as the answer's keeping
    left it (kept in one statement too: `_keep_at_once`). None: nothing written; the locked
    path runs."""
    step = unlocked_step(ctx, sample) if sample.step == Step.ARCHIVE else None
    if step is None:
        return None
    capture, children = evidence_services.capture_rows(
        sample=sample,
        attempt_no=attempt.attempt_no,
        archived=archived,
        token=ctx.token,
        captured_at=entry.received_at,
    )
    verdict = verdict_for(ahead, capture)
    evidence = evidence_of(sample, archived.result)
    outcome = step.answered(upstream_id=entry.upstream_id, evidence=evidence, verdict=verdict)
    charge = charge_rows(sample, verdict)
    rows = [capture, *children, *charge]
    if not step.write_at_once(then_insert=rows, then_delete=[entry], skip_conflicts=charge):
        return None
    return outcome


def _archive_failed(ctx: StepContext, entry: AnswerInbox, error: Exception) -> str:
    outage = store_unavailable(error)
    if outage:
        log.warning("archive of sample %s waits for the store: %s", ctx.sample_id, error)
    else:
        log.exception("archive of sample %s failed", ctx.sample_id)
    age = (db_now() - entry.received_at).total_seconds()
    with locked_step(ctx, "archive-later") as step:
        decision = retry_policy().after_archive_error(
            error, outage=outage, claims=step.sample.claims, age_seconds=age
        )
        if decision.action == REVIEW:
            return step.park(reason=decision.reason)
        return step.archive_later(decision, outage=outage)
