"""Executing one step of one sample: submit, verify, poll, evidence, analyse.

Each step is entered with a fencing token from a claim. The pattern is always the same:
1. a short transaction records intent (the attempt and its idempotency key) before any call;
2. the upstream call happens outside any transaction, with the lease renewed meanwhile;
3. a second transaction, conditional on the token, records the outcome and the next step.

This module does the I/O and says what happened; the sample's state change for each outcome
lives in `sampling.steps` (one method per outcome, one compare-and-set write), and what to do
after an upstream error is `connectors.retry.RetryPolicy`'s decision.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import connection
from django.db.models import Func, JSONField

from analysis.services import AnalysisAhead, Verdict, analyse_ahead, analyse_sample
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
from connectors.retry import FAIL, REVIEW, VERIFY, RetryDecision, RetryPolicy
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
from sampling.plainsql import columns, from_row
from sampling.steps import STORED, Evidence, SampleStep, fenced_step
from sampling.transitions import StaleToken

log = logging.getLogger(__name__)


class DuplicateInFlight(Exception):
    """A second delivery of a message whose first copy is still working under the same
    lease (e.g. redelivered by the broker's visibility timeout)."""


@dataclass(frozen=True)
class StepContext:
    sample_id: int
    token: int
    worker: str
    # The sample as read before the step, with its run and question (frozen at launch): the
    # step's fenced writes reuse them instead of reading them again (`_step`).
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


def retry_policy() -> RetryPolicy:
    """The retry policy of every step, from the settings."""
    return RetryPolicy(
        max_attempts=settings.GEO_MAX_SUBMIT_ATTEMPTS, max_step_claims=settings.GEO_MAX_STEP_CLAIMS
    )


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
    if retry_policy().claimed_too_often(sample.claims):
        reason = f"poison: step {sample.step} claimed {sample.claims} times"
        return _decided(context, RetryDecision(REVIEW, 0.0, reason))
    with keep_lease(sample_id=sample_id, token=token):
        return _guarded(context, sample, lambda: handler(context, sample))


def _start_lease(sample_id: int, token: int) -> bool:
    """The lease runs from the claim; its message may have waited in the queue past it.
    Before any work, renew it if nobody swept or took it over meanwhile."""
    return renew_lease(
        sample_id=sample_id, token=token, lease_seconds=settings.GEO_LEASE_SECONDS, starting=True
    )


def _step(ctx: StepContext, operation: str) -> AbstractContextManager[SampleStep]:
    """This step's sample, locked for one outcome (`sampling.steps.fenced_step`)."""
    return fenced_step(
        sample_id=ctx.sample_id,
        token=ctx.token,
        operation=operation,
        worker=ctx.worker,
        loaded=ctx.loaded,
        on_end=_run_may_have_ended,
    )


def _run_may_have_ended(run_id: UUID) -> None:
    finish_run_if_done(run_id=run_id)


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
        return _decided(ctx, retry_policy().after_step_error(claims=sample.claims))


def _decided(ctx: StepContext, decision: RetryDecision) -> str:
    """Apply the policy's decision after an upstream error: do the step again later, park the
    sample for a person, or fail it with the reason."""
    with _step(ctx, {FAIL: "fail", REVIEW: "park"}.get(decision.action, "retry")) as step:
        if decision.action == FAIL:
            return step.fail(reason=decision.reason)
        if decision.action == REVIEW:
            return step.park(reason=decision.reason)
        return step.retry_later(decision)


# --- batch submit -------------------------------------------------------------------------

_Begun = tuple[StepContext, Sample, Attempt]


def run_submit_batch(
    *, held: list[tuple[int, int]], worker: str = "", loaded: Mapping[int, Sample] | None = None
) -> dict[int, str]:
    """Submit the due samples of one batch-accepting platform in one upstream call (the
    dispatcher groups them, up to the platform's submission limit). Each sample keeps its own
    attempt, idempotency key and fenced writes, and its own outcome: a batch may be accepted
    in part. A sample not due for a plain submit any more (stale message, poison cap) takes
    the single-sample path. `loaded`: the samples as the recorder read them. Returns sample
    id -> what happened."""
    outcomes: dict[int, str] = {}
    begun: list[_Begun] = []
    policy = retry_policy()
    for sample_id, token in held:
        sample = (loaded or {}).get(sample_id) or load_for_step(sample_id)
        due = (
            sample is not None
            and sample.step == Step.SUBMIT
            and sample.fencing_token == token
            and sample.queue_state == QueueState.LEASED
            and not policy.claimed_too_often(sample.claims)
        )
        if not due or sample is None:
            outcomes[sample_id] = run_step(
                sample_id=sample_id, token=token, worker=worker, loaded=sample
            )
            continue
        if not _start_lease(sample_id, token):
            outcomes[sample_id] = "stale-message"
            continue
        ctx = StepContext(sample_id=sample_id, token=token, worker=worker, loaded=sample)
        outcome = _guarded(ctx, sample, partial(_begin_in_batch, ctx, begun))
        if outcome:
            outcomes[sample_id] = outcome
    if begun:
        with keep_leases([(ctx.sample_id, ctx.token) for ctx, _, _ in begun]):
            outcomes.update(_submit_together(begun))
    return outcomes


def _begin_in_batch(ctx: StepContext, begun: list[_Begun]) -> str:
    started = _begin_attempt(ctx)
    if isinstance(started, str):
        return started
    begun.append((ctx, *started))
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


def _begin_attempt(ctx: StepContext) -> tuple[Sample, Attempt] | str:
    """Persist the attempt and its idempotency key before calling the upstream; or what was
    done instead (the sample is uncertain, or its run cancelled)."""
    with _step(ctx, "submit") as step:
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
    with connection.cursor() as cursor:
        cursor.execute(_RUN_CANCELLED, [key])
        return cursor.fetchone() is not None


def handle_submit(ctx: StepContext, loaded: Sample) -> str:
    begun = _begin_attempt(ctx)
    if isinstance(begun, str):
        return begun
    sample, attempt = begun
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


def _queue_cost(attempt: Attempt) -> None:
    """Queued in the fenced write that records the attempt's outcome; booked by the
    dispatcher's next tick, and the run's end books any that were missed."""
    if attempt.cost:
        queue_attempt_cost(run_id=attempt.sample.run_id, attempt_id=attempt.pk)


def _submit_decision(
    sample: Sample, error: UpstreamError | ErrorClass, attempt_no: int
) -> RetryDecision:
    """What the policy says after a failed attempt, counting the attempts and time of this
    round (a resume starts a new one), in database time."""
    first = (
        sample.attempt_set.filter(attempt_no__gt=sample.attempts_before_resume)
        .order_by("attempt_no")
        .values_list("started_at", flat=True)
        .first()
    )
    return retry_policy().decide(
        error,
        attempt_no=attempt_no - sample.attempts_before_resume,
        elapsed_seconds=(db_now() - first).total_seconds() if first else 0.0,
        rng=random.Random(),
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
    return _archive(sample, result)


def _record_submit_error(
    ctx: StepContext, sample: Sample, attempt: Attempt, error: UpstreamError
) -> str:
    archived = _error_capture(sample, error)  # `sample` was loaded with its run for the call
    with _step(ctx, "submit") as step:
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
    with _step(ctx, "accept") as step:
        step.close_attempt(attempt, status=AttemptStatus.ACCEPTED, outcome=outcome)
        _queue_cost(attempt)
        first_poll = retry_policy().poll_delay(age_seconds=0.0)
        return step.accepted(upstream_id=outcome.upstream_id, poll_in=first_poll)


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
    rendered = _wants_rendered_screenshot(sample)
    ahead = None if failed or rendered else _analyse_ahead(sample, result)
    failpoint("after_store_before_complete")
    with _step(ctx, "answer") as step:
        if failed and not unparsed:  # truncated, or an error mid-stream: asked again
            step.close_attempt(
                attempt,
                status=AttemptStatus.FAILED,
                outcome=outcome,
                error_class=_error_class(result).value,
                error_message=_error_message(result),
            )
        else:
            step.close_attempt(attempt, status=AttemptStatus.ACCEPTED, outcome=outcome)
        _queue_cost(attempt)
        capture = evidence_services.record_capture(
            sample=step.sample, attempt_no=attempt.attempt_no, archived=archived, token=ctx.token
        )
        if unparsed:
            return step.hold_unparsed(upstream_id=outcome.upstream_id, error=_error_message(result))
        if failed:
            # The raw of this attempt is already archived as its own capture revision.
            decision = _submit_decision(step.sample, _error_class(result), attempt.attempt_no)
            return step.submit_failed(
                decision, error_class=_error_class(result), message=attempt.error_message
            )
        if rendered:
            # The page is photographed on the evidence queue, so screenshots never hold an
            # answer-collection slot; evidence stays pending until then.
            return step.answered(upstream_id=outcome.upstream_id, evidence=None, verdict=None)
        verdict = _verdict(ahead, capture)
        answered = step.answered(
            upstream_id=outcome.upstream_id,
            evidence=_evidence_of(step.sample, result),
            verdict=verdict,
        )
        _queue_charge(step.sample, verdict)
    return answered


def _analyse_ahead(sample: Sample, result: NormalizedResult) -> AnalysisAhead | None:
    """The analysis of an answer just collected, derived before the fenced write that records
    it, when it is local and cheap (analysis.services.analyse_ahead); None sends the sample
    to the analysis queue as before. `sample` carries its run."""
    if not settings.GEO_ANALYSE_INLINE:
        return None
    try:
        return analyse_ahead(
            sample=sample, answer_text=result.answer_text, collection_state=result.collection_state
        )
    except Exception:  # the analysis step will try again on its own, with its retries
        log.exception("inline analysis failed sample=%s; queued for analysis", sample.pk)
        return None


def _verdict(ahead: AnalysisAhead | None, capture: Capture) -> Verdict | None:
    """The analysis derived ahead, for the capture just written (None: the analysis step)."""
    return None if ahead is None else ahead.verdict_for(capture)


def _queue_charge(sample: Sample, verdict: Verdict | None) -> None:
    """A valid answer's charge: posted with the run's other charges by the dispatcher's next
    tick, or when the run finishes (docs/decisions.md, settlement off the hot account rows)."""
    if verdict is not None and verdict.valid:
        billing.queue_capture(run_id=sample.run_id, sample_id=sample.pk)


def _error_class(result: NormalizedResult) -> ErrorClass:
    return ErrorClass((result.error or {}).get("class", ErrorClass.TRUNCATED))


def _error_message(result: NormalizedResult, default: str = "") -> str:
    return str((result.error or {}).get("message", default))[:2000]


def _archive(sample: Sample, result: NormalizedResult) -> evidence_services.ArchivedResult:
    return evidence_services.archive_objects(
        result=result,
        tenant=sample.run.config_snapshot["tenant"],
        run_id=str(sample.run_id),
        sample_id=sample.pk,
        revision=evidence_services.next_revision(sample_id=sample.pk),
    )


def _evidence_of(s: Sample, result: NormalizedResult) -> Evidence:
    """How the answer's evidence settles: partial when the upstream says so, or when a
    screenshot the campaign wants and the platform takes did not come."""
    missing = [w for w in result.warnings if w.endswith("_UNAVAILABLE")]
    if result.evidence_state == "partial" or missing:
        return Evidence(partial_reason=", ".join(missing) or "partial evidence")
    wanted_screenshot = s.run.config_snapshot.get("screenshot_policy") != "none"
    if (
        wanted_screenshot
        and not any(a.kind == "screenshot" for a in result.attachments)
        and get_connector(s.platform).capabilities().screenshots
    ):
        return Evidence(partial_reason="SCREENSHOT_UNAVAILABLE")
    return STORED


# --- verify (uncertain acceptance) --------------------------------------------------------


def handle_verify(ctx: StepContext, sample: Sample) -> str:
    attempt = sample.attempt_set.order_by("-attempt_no").first()
    if attempt is None:
        raise RuntimeError(f"sample {sample.pk} is uncertain without an attempt")
    _upstream_wait()
    try:
        upstream_id = get_connector(sample.platform).lookup(attempt.idempotency_key)
    except UpstreamError as error:
        return _decided(ctx, retry_policy().after_verify_error(error))
    with _step(ctx, "verify") as step:
        if upstream_id:
            return step.verified(attempt, upstream_id=upstream_id)
        return step.not_accepted(attempt)


# --- poll ---------------------------------------------------------------------------------


def _age_seconds(sample: Sample) -> float:
    """How long ago the upstream accepted the task, in database time."""
    return (db_now() - sample.accepted_at).total_seconds() if sample.accepted_at else 0.0


def handle_poll(ctx: StepContext, sample: Sample) -> str:
    policy = retry_policy()
    _upstream_wait()
    try:
        polled = get_connector(sample.platform).poll(sample.upstream_id)
    except UpstreamError as error:
        # The age is read only when there is no hint to follow (the policy prefers the hint).
        age = 0.0 if error.retry_after else _age_seconds(sample)
        return _decided(ctx, policy.after_poll_error(error, claims=sample.claims, age_seconds=age))
    if polled.state in ("queued", "running"):
        age = 0.0 if polled.retry_after else _age_seconds(sample)
        decision = policy.next_poll(age_seconds=age, hint=polled.retry_after)
        with _step(ctx, "poll") as step:
            return step.poll_again(decision, state=polled.state)
    with _step(ctx, "poll") as step:
        if polled.state == "completed":
            return step.poll_completed()
        return step.fail(reason=f"upstream reports {polled.state}: {polled.message or ''}")


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
    missing = ""
    if capture is None:
        missing = "SCREENSHOT_UNAVAILABLE: no completed capture to render"
    else:
        try:
            png = render_answer_page(capture_id=capture.pk)
            evidence_services.store_screenshot(sample_id=sample.pk, capture_id=capture.pk, png=png)
        except ScreenshotUnavailable as unavailable:
            missing = unavailable.reason[:200]
        except evidence_services.EvidenceExists:
            pass  # an earlier holder of this step stored it; never replaced
    with _step(ctx, "screenshot") as step:
        return step.screenshot(missing=missing)  # the answer still counts; the report says why


def handle_evidence(ctx: StepContext, sample: Sample) -> str:
    if not get_connector(sample.platform).capabilities().asynchronous:
        return _render_screenshot(ctx, sample)
    _upstream_wait()
    try:
        result = inputs.upstream_result(
            get_connector(sample.platform).fetch_evidence(sample.upstream_id, sample_id=sample.pk)
        )
    except UpstreamError as error:
        return _decided(ctx, retry_policy().after_evidence_error(error, claims=sample.claims))
    archived = _archive(sample, result)
    completed = result.collection_state == CollectionState.COMPLETED
    ahead = _analyse_ahead(sample, result) if completed else None
    failpoint("after_store_before_complete")
    with _step(ctx, "evidence") as step:
        capture = evidence_services.record_capture(
            sample=step.sample, attempt_no=step.sample.attempts, archived=archived, token=ctx.token
        )
        if not completed and _error_class(result) == ErrorClass.PARSE_FAILED:
            return step.hold_unparsed(upstream_id=None, error=_error_message(result))
        if not completed:
            reason = _error_message(result, "collection failed")
            outcome = step.fail(reason=reason, outcome="evidence-stored")
        else:
            verdict = _verdict(ahead, capture)
            evidence = _evidence_of(step.sample, result)
            outcome = step.evidence_stored(evidence=evidence, verdict=verdict)
            _queue_charge(step.sample, verdict)
    if capture.upstream_cost is not None:
        billing.record_upstream_cost(capture_id=capture.pk)  # idempotent per task
    return outcome


# --- analyse ------------------------------------------------------------------------------


def handle_analyse(ctx: StepContext, sample: Sample) -> str:
    verdict = analyse_sample(sample_id=ctx.sample_id)
    with _step(ctx, "analyse") as step:
        outcome = step.analysed(verdict)
        _queue_charge(step.sample, verdict)
    return outcome


_HANDLERS: dict[str, Callable[[StepContext, Sample], str]] = {
    Step.SUBMIT: handle_submit,
    Step.VERIFY: handle_verify,
    Step.POLL: handle_poll,
    Step.EVIDENCE: handle_evidence,
    Step.ANALYSE: handle_analyse,
}
