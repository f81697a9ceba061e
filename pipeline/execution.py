"""Executing one step of one sample: submit, verify, poll, evidence, analyse.

Each step is entered with a fencing token from a claim. The pattern is always the same:
1. a short transaction records intent (the attempt and its idempotency key) before any call;
2. the upstream call happens outside any transaction, with the lease renewed meanwhile;
3. a second transaction, conditional on the token, records the outcome and the next step.

This module and pipeline/submission.py do the I/O and say what happened; the sample's state
change for each outcome lives in `sampling.steps` (one method per outcome, one compare-and-set
write of the fields it changed), and what to do after an upstream error is decided by
`connectors.retry.RetryPolicy` (pipeline/step_context.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial

from django.conf import settings
from django.db import connections

from analysis.services import analyse_sample
from billing import services as billing
from billing.costs import queue_attempt_cost
from connectors.base import ErrorClass, UpstreamError
from connectors.retry import REASK, REVIEW, RetryDecision
from evidence import services as evidence_services
from evidence.models import Capture
from evidence.screenshots import ScreenshotUnavailable, render_answer_page
from geo_collect.failpoints import failpoint
from pipeline.step_context import (
    DuplicateInFlight as DuplicateInFlight,
)
from pipeline.step_context import (
    StepContext,
    analyse_inline,
    archive,
    connector,
    decided,
    error_class_of,
    error_message_of,
    evidence_of,
    guarded,
    keep_lease,
    keep_leases,
    locked_step,
    queue_charge,
    retry_policy,
    uncertain_reask_seconds,
    upstream_call,
    verdict_for,
)
from pipeline.step_context import frozen_model as frozen_model
from pipeline.submission import (
    Begun,
    begin_in_batch,
    handle_archive,
    handle_submit,
    submit_together,
)
from sampling import inputs
from sampling.dbtime import db_now
from sampling.leases import renew_lease
from sampling.models import Attempt, CollectionState, QueueState, Sample, Step
from sampling.steps import lease_fresh, load_for_step

log = logging.getLogger(__name__)


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
    if not _start_lease(sample, token):
        return "stale-message"
    if retry_policy().claimed_too_often(sample.claims):
        reason = f"poison: step {sample.step} claimed {sample.claims} times"
        return decided(context, RetryDecision(REVIEW, 0.0, reason))
    with keep_lease(sample_id=sample_id, token=token):
        return guarded(context, sample, lambda: handler(context, sample))


def _start_lease(sample: Sample, token: int) -> bool:
    """The lease runs from the claim; its message may have waited in the queue past it.
    Before any work, renew it if nobody swept or took it over meanwhile. A lease read with
    more than two thirds of it left (`lease_fresh`: the usual case, a claim made moments ago)
    is not renewed: the step's renewer takes over a third of a lease later, and the fenced
    writes check the lease anyway. That saves a statement and a row version per step."""
    if lease_fresh(sample):
        return True
    return renew_lease(
        sample_id=sample.pk, token=token, lease_seconds=settings.GEO_LEASE_SECONDS, starting=True
    )


# --- several steps of one message ----------------------------------------------------------

_step_threads: ThreadPoolExecutor | None = None
_step_threads_made = threading.Lock()


def run_steps_together(
    held: list[tuple[int, int]], run_one: Callable[[int, int], str]
) -> dict[int, str]:
    """The claims of one message (a dispatcher tick's, for one queue), each run as its own step
    by `run_one(sample_id, token)`, all at once: the first on this thread, the others on the
    worker's step threads. A step that raises is that step's alone: logged, its outcome
    `error`, its lease left to lapse (the sweep hands the sample out again), as when a message
    of its own raised. Returns sample id -> what happened."""
    if not held:
        return {}
    pool = _threads()
    others = {
        sample_id: pool.submit(_on_step_thread, run_one, sample_id, token)
        for sample_id, token in held[1:]
    }
    first_id, first_token = held[0]
    # Its connection goes back to the pool before the wait: held by Celery's threads while they
    # wait, a pool's every connection could be out, with the steps waited on unable to get one.
    outcomes = {first_id: _on_step_thread(run_one, first_id, first_token)}
    outcomes.update(_results(others))
    return outcomes


def _threads() -> ThreadPoolExecutor:
    global _step_threads
    with _step_threads_made:
        if _step_threads is None:
            _step_threads = ThreadPoolExecutor(
                max_workers=settings.GEO_WORKER_STEP_THREADS, thread_name_prefix="step"
            )
        return _step_threads


def _results(futures: dict[int, Future[str]]) -> dict[int, str]:
    return {sample_id: future.result() for sample_id, future in futures.items()}


def _isolated(run_one: Callable[[int, int], str], sample_id: int, token: int) -> str:
    try:
        return run_one(sample_id, token)
    except Exception:
        log.exception("step of sample %s (token %s) failed", sample_id, token)
        return "error"


def _on_step_thread(run_one: Callable[[int, int], str], sample_id: int, token: int) -> str:
    try:
        return _isolated(run_one, sample_id, token)
    finally:
        connections.close_all()  # back to the worker's pool, as Celery does after a task


# --- batch submit -------------------------------------------------------------------------


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
    begun: list[Begun] = []
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
        if not _start_lease(sample, token):
            outcomes[sample_id] = "stale-message"
            continue
        ctx = StepContext(sample_id=sample_id, token=token, worker=worker, loaded=sample)
        outcome = guarded(ctx, sample, partial(begin_in_batch, ctx, begun))
        if outcome:
            outcomes[sample_id] = outcome
    if begun:
        with keep_leases([(ctx.sample_id, ctx.token) for ctx, _, _ in begun]):
            outcomes.update(submit_together(begun))
    return outcomes


# --- verify (uncertain acceptance) --------------------------------------------------------


def handle_verify(ctx: StepContext, sample: Sample) -> str:
    attempt = sample.attempt_set.order_by("-attempt_no").first()
    if attempt is None:
        raise RuntimeError(f"sample {sample.pk} is uncertain without an attempt")
    find_again = connector(sample.platform).find_again
    try:
        found = upstream_call(sample.platform, lambda: find_again(attempt.idempotency_key))
    except UpstreamError as error:
        return _verify_failed(ctx, sample, attempt, error)
    with locked_step(ctx, "verify") as step:
        if found:
            outcome = step.verified(attempt, upstream_id=found.upstream_id, cost=found.cost)
            if found.cost is not None:
                queue_attempt_cost(run_id=sample.run_id, attempt_id=attempt.pk)
            return outcome
        return step.not_accepted(attempt)


def _verify_failed(ctx: StepContext, sample: Sample, attempt: Attempt, error: UpstreamError) -> str:
    """The lookup failed: park, look again, or (a platform that cannot look up, whose policy
    is to re-ask) ask again once the uncertain attempt is old enough."""
    reask_after = uncertain_reask_seconds(sample.platform)
    age = 0.0
    if reask_after is not None and error.error_class is ErrorClass.UNSUPPORTED:
        age = (db_now() - attempt.started_at).total_seconds()
    decision = retry_policy().after_verify_error(error, reask_after=reask_after, age_seconds=age)
    if decision.action != REASK:
        return decided(ctx, decision)
    with locked_step(ctx, "reask") as step:
        return step.reasked(attempt, reason=decision.reason)


# --- poll ---------------------------------------------------------------------------------


def _age_seconds(sample: Sample) -> float:
    """How long ago the upstream accepted the task, in database time."""
    return (db_now() - sample.accepted_at).total_seconds() if sample.accepted_at else 0.0


def handle_poll(ctx: StepContext, sample: Sample) -> str:
    policy = retry_policy()
    poll = connector(sample.platform).poll
    try:
        polled = upstream_call(sample.platform, lambda: poll(sample.upstream_id))
    except UpstreamError as error:
        # Failed polls are bounded by the task's age (its deadline), not by their count.
        return decided(ctx, policy.after_poll_error(error, age_seconds=_age_seconds(sample)))
    if polled.state in ("queued", "running"):
        age = 0.0 if polled.retry_after else _age_seconds(sample)
        decision = policy.next_poll(age_seconds=age, hint=polled.retry_after)
        with locked_step(ctx, "poll") as step:
            return step.poll_again(decision, state=polled.state)
    with locked_step(ctx, "poll") as step:
        if polled.state == "completed":
            return step.poll_completed()
        return step.fail(reason=f"upstream reports {polled.state}: {polled.message or ''}")


# --- evidence -----------------------------------------------------------------------------


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
    with locked_step(ctx, "screenshot") as step:
        return step.screenshot(missing=missing)  # the answer still counts; the report says why


def handle_evidence(ctx: StepContext, sample: Sample) -> str:
    if not connector(sample.platform).capabilities().asynchronous:
        return _render_screenshot(ctx, sample)
    fetch = connector(sample.platform).fetch_evidence
    try:
        result = inputs.upstream_result(
            upstream_call(sample.platform, lambda: fetch(sample.upstream_id, sample_id=sample.pk))
        )
    except UpstreamError as error:
        return decided(ctx, retry_policy().after_evidence_error(error, claims=sample.claims))
    archived = archive(sample, result)
    completed = result.collection_state == CollectionState.COMPLETED
    ahead = analyse_inline(sample, result) if completed else None
    failpoint("after_store_before_complete")
    with locked_step(ctx, "evidence") as step:
        capture = evidence_services.record_capture(
            sample=step.sample, attempt_no=step.sample.attempts, archived=archived, token=ctx.token
        )
        if not completed and error_class_of(result) == ErrorClass.PARSE_FAILED:
            return step.hold_unparsed(upstream_id=None, error=error_message_of(result))
        if not completed:
            reason = error_message_of(result, "collection failed")
            outcome = step.fail(reason=reason, outcome="evidence-stored")
        else:
            verdict = verdict_for(ahead, capture)
            evidence = evidence_of(step.sample, result)
            outcome = step.evidence_stored(evidence=evidence, verdict=verdict)
            queue_charge(step.sample, verdict)
    if capture.upstream_cost is not None:
        billing.record_upstream_cost(capture_id=capture.pk)  # idempotent per task
    return outcome


# --- analyse ------------------------------------------------------------------------------


def handle_analyse(ctx: StepContext, sample: Sample) -> str:
    verdict = analyse_sample(sample_id=ctx.sample_id)
    with locked_step(ctx, "analyse") as step:
        outcome = step.analysed(verdict)
        queue_charge(step.sample, verdict)
    return outcome


_HANDLERS: dict[str, Callable[[StepContext, Sample], str]] = {
    Step.SUBMIT: handle_submit,
    Step.ARCHIVE: handle_archive,
    Step.VERIFY: handle_verify,
    Step.POLL: handle_poll,
    Step.EVIDENCE: handle_evidence,
    Step.ANALYSE: handle_analyse,
}
