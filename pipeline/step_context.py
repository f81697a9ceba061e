"""What every step of a sample shares: its context, its lock, the retry policy, the upstream
and the evidence and analysis helpers of the steps that collect an answer.

The state change of each outcome lives in `sampling.steps`; what to do after an upstream
error is `connectors.retry.RetryPolicy`'s decision. Steps: pipeline/execution.py (entry,
verify, poll, evidence, analyse) and pipeline/submission.py (submit).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import TypeVar
from uuid import UUID

from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as StoreConnectionError
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, InterfaceError, OperationalError, connection
from django.db.models import Model

from analysis.services import AnalysisAhead, Verdict, analyse_ahead
from billing import services as billing
from connectors.base import Connector, ErrorClass, NormalizedResult, SampleRequest, UpstreamError
from connectors.registry import get_connector
from connectors.retry import FAIL, REVIEW, RetryDecision, RetryPolicy
from evidence import services as evidence_services
from evidence.models import Capture
from pipeline import circuits
from pipeline.runs import finish_run_if_done
from sampling.leases import renew_lease
from sampling.models import Run, Sample
from sampling.snapshots import RunConfig
from sampling.steps import STORED, Evidence, SampleStep, fenced_step, step_at_once
from sampling.transitions import StaleToken

log = logging.getLogger("pipeline.execution")
_T = TypeVar("_T")


def connector(platform: str) -> Connector:
    """The platform's connector: every step asks its upstream through this one lookup."""
    return get_connector(platform)


class DuplicateInFlight(Exception):
    """A second delivery of a message whose first copy is still working under the same
    lease (e.g. redelivered by the broker's visibility timeout)."""


@dataclass(frozen=True)
class StepContext:
    sample_id: int
    token: int
    worker: str
    # The sample as read before the step, with its run and question (frozen at launch): the
    # step's fenced writes reuse them instead of reading them again (`locked_step`).
    loaded: Sample | None = field(default=None, compare=False)


def retry_policy() -> RetryPolicy:
    """The retry policy of every step, from the settings."""
    return RetryPolicy(
        max_attempts=settings.GEO_MAX_SUBMIT_ATTEMPTS,
        max_step_claims=settings.GEO_MAX_STEP_CLAIMS,
        poll_deadline_seconds=settings.GEO_POLL_DEADLINE_SECONDS,
        # An answer in hand is kept for as long as the step's lease can hold (its fence still
        # takes the write): a database outage up to about a lease loses no answer.
        inbox_write_seconds=float(settings.GEO_LEASE_SECONDS),
    )


def uncertain_reask_seconds(platform: str) -> float | None:
    """The platform's policy for a request whose outcome it cannot confirm: None, parked for
    a person (the default); seconds, asked again that long after the uncertain attempt
    started (GEO_<PLATFORM>_UNCERTAIN_REASK_SECONDS)."""
    given = settings.GEO_PLATFORMS.get(platform, {}).get("UNCERTAIN_REASK_SECONDS", "")
    if not str(given).strip():
        return None
    try:
        seconds = float(given)
    except ValueError:
        seconds = -1.0
    if seconds < 0:
        raise ImproperlyConfigured(
            f"GEO_{platform.upper()}_UNCERTAIN_REASK_SECONDS must be a number of seconds "
            f"(0 or more), not {given!r}"
        )
    return seconds


def locked_step(ctx: StepContext, operation: str) -> AbstractContextManager[SampleStep]:
    """This step's sample, locked for one outcome (`sampling.steps.fenced_step`)."""
    return fenced_step(
        sample_id=ctx.sample_id,
        token=ctx.token,
        operation=operation,
        worker=ctx.worker,
        loaded=ctx.loaded,
        on_end=_run_may_have_ended,
    )


def unlocked_step(ctx: StepContext, sample: Sample) -> SampleStep | None:
    """This step's sample, unlocked: its outcome written in one statement with the rows that
    go with it (`sampling.steps.step_at_once`); None: take `locked_step`."""
    return step_at_once(sample, token=ctx.token, on_end=_run_may_have_ended)


def _run_may_have_ended(run_id: UUID) -> None:
    finish_run_if_done(run_id=run_id)


def guarded(ctx: StepContext, sample: Sample, work: Callable[[], str]) -> str:
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
        return decided(ctx, retry_policy().after_step_error(claims=sample.claims))


def decided(ctx: StepContext, decision: RetryDecision) -> str:
    """Apply the policy's decision after an upstream error: do the step again later, park the
    sample for a person, or fail it with the reason."""
    with locked_step(ctx, {FAIL: "fail", REVIEW: "park"}.get(decision.action, "retry")) as step:
        if decision.action == FAIL:
            return step.fail(reason=decision.reason)
        if decision.action == REVIEW:
            return step.park(reason=decision.reason)
        return step.retry_later(decision)


# --- the upstream and the lease -----------------------------------------------------------


def give_connection_back() -> None:
    """Before a wait (an upstream's seconds, a turn at answer work; no database work): give
    the thread's database connection back to the worker's pool (settings.GEO_WORKER_DB_POOL),
    so threads that wait hold none. Without a pool the connection is kept: closing it would
    cost a new PostgreSQL session per step. Never inside a transaction (no network I/O in one
    anyway)."""
    if getattr(connection, "pool", None) is not None and not connection.in_atomic_block:
        connection.close()


def upstream_call(platform: str, call: Callable[[], _T]) -> _T:
    """Ask the platform (`call`), telling its circuit (pipeline/circuits.py) whether the
    call reached it: a connection failure is counted (and may open the circuit), anything the
    platform sent back closes a circuit this process counted failures on (else costs
    nothing). A sent request that got nothing back says neither."""
    give_connection_back()
    try:
        result = call()
    except UpstreamError as error:
        if error.error_class is ErrorClass.UNREACHABLE:
            _tell_circuit(circuits.unreachable, platform, error.egress)
        elif error.error_class is not ErrorClass.ACCEPTANCE_UNKNOWN:
            _tell_circuit(circuits.reached, platform, error.egress)
        raise
    _tell_circuit(circuits.reached, platform, getattr(result, "egress", None))
    return result


def _tell_circuit(report: Callable[..., object], platform: str, egress: str | None) -> None:
    # The circuit is advice to the dispatcher: a database error here must not replace the
    # step's own outcome (the step's fenced write meets the outage itself).
    try:
        report(platform=platform, egress=egress)
    except DatabaseError as error:
        log.warning("circuit of %s not updated: %s", platform, error)


# --- answer work ---------------------------------------------------------------------------
# What a step does with an answer once it is read (its cost, keeping it, the evidence rows,
# the analysis, the sample's move) is the CPU of a worker, all under one interpreter lock.
# Answers that arrive together (every stream of a wave ends within a second) would each get a
# sliver of it and all finish late, while the messages that would start the next requests
# wait behind them. A few at a time, they finish one after another, each freeing its slot as
# it ends, and the rest of the worker is not starved (docs/decisions.md, "Answer work, a few
# threads at a time").

_answer_turns: dict[int, threading.BoundedSemaphore] = {}
_answer_turns_made = threading.Lock()
_holding = threading.local()  # .turns: the semaphore this thread holds a turn of, or None


def _turns(size: int) -> threading.BoundedSemaphore:
    with _answer_turns_made:
        return _answer_turns.setdefault(size, threading.BoundedSemaphore(size))


def _take_turn(turns: threading.BoundedSemaphore) -> None:
    if turns.acquire(blocking=False):
        return
    # Never wait holding a pooled connection: the threads whose turn it is need one.
    give_connection_back()
    turns.acquire()


@contextmanager
def answer_work() -> Iterator[None]:
    """Process a read answer in one of settings.GEO_WORKER_ANSWER_THREADS turns of this
    worker (0: no bound); a thread already in its turn keeps it."""
    size = settings.GEO_WORKER_ANSWER_THREADS
    if size <= 0 or getattr(_holding, "turns", None) is not None:
        yield
        return
    turns = _turns(size)
    _take_turn(turns)
    _holding.turns = turns
    try:
        yield
    finally:
        _holding.turns = None
        turns.release()


@contextmanager
def outside_answer_work() -> Iterator[None]:
    """Within answer work, a wait on something else (the evidence store's uploads): the turn
    is given up meanwhile and taken again after."""
    turns = getattr(_holding, "turns", None)
    if turns is None:
        yield
        return
    _holding.turns = None
    turns.release()
    try:
        yield
    finally:
        _take_turn(turns)
        _holding.turns = turns


def keep_lease(*, sample_id: int, token: int) -> AbstractContextManager[None]:
    """Renew the lease in the background while a step works (long streams, slow uploads)."""
    return keep_leases([(sample_id, token)])


@contextmanager
def keep_leases(held: list[tuple[int, int]]) -> Iterator[None]:
    """Renew the leases of (sample id, token) pairs while one call works for all of them
    (a batch submit); a lease taken over is no longer renewed. Each lease is renewed a third
    of a lease after the step started and every third of a lease after that, by the process's
    one renewer thread (`LeaseRenewer`)."""
    RENEWER.hold(held)
    try:
        yield
    finally:
        RENEWER.release(held)


class LeaseRenewer:
    """One thread per worker process renews the leases of every step in progress, each a third
    of a lease after its step started or it was last renewed. It replaced a thread started and
    joined by every step (about 0.4 ms of a worker's CPU per step: docs/decisions.md, "One
    lease renewer per worker"). Leases are counted by holder, so a second copy of a message
    (same sample and token) that stops early does not stop the renewal of the first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._due: dict[tuple[int, int], float] = {}  # lease -> monotonic time of its renewal
        self._holders: Counter[tuple[int, int]] = Counter()
        self._wake = threading.Event()
        self._idle = threading.Event()
        self._thread: threading.Thread | None = None

    def hold(self, leases: list[tuple[int, int]]) -> None:
        due = time.monotonic() + settings.GEO_LEASE_SECONDS / 3
        with self._lock:
            idle = not self._due
            for lease in leases:
                self._holders[lease] += 1
                self._due.setdefault(lease, due)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="lease-renewer", daemon=True)
                self._thread.start()
        # A lease added now is due no sooner than those already held (each of them is due at
        # most a third of a lease from now): the thread only needs waking when it was idle.
        if idle:
            self._wake.set()

    def release(self, leases: list[tuple[int, int]]) -> None:
        with self._lock:
            for lease in leases:
                self._holders[lease] -= 1
                if self._holders[lease] <= 0:
                    del self._holders[lease]
                    self._due.pop(lease, None)
            idle = not self._due
        if idle:
            self._wake.set()  # the thread lets its database session go while nothing is held

    def held(self) -> set[tuple[int, int]]:
        with self._lock:
            return set(self._due)

    def wait_idle(self, seconds: float) -> bool:
        """Whether the thread holds no lease and no database session (within `seconds`)."""
        return self._idle.wait(seconds)

    def _run(self) -> None:
        while True:
            self._wake.clear()
            with self._lock:
                soonest = min(self._due.values(), default=None)
            if soonest is None:
                connection.close()  # nothing to renew: no session kept for nothing
                self._idle.set()
            self._wake.wait(None if soonest is None else max(0.0, soonest - time.monotonic()))
            self._idle.clear()
            try:
                self._renew_due()
            except Exception:  # the renewer must outlive any one failure
                log.exception("lease renewal round failed")
                connection.close()
            give_connection_back()  # between rounds

    def _renew_due(self) -> None:
        lease = settings.GEO_LEASE_SECONDS
        now = time.monotonic()
        with self._lock:
            due = [held for held, at in self._due.items() if at <= now]
        for sample_id, token in due:
            try:
                live = renew_lease(sample_id=sample_id, token=token, lease_seconds=lease)
            except (OperationalError, InterfaceError) as error:
                # The database is away: keep renewing once it is back, so a worker holding an
                # answer (retrying to keep it) does not lose its lease to the outage.
                log.warning("lease renewal failed, retrying: %s", error)
                connection.close()
                live = True
            with self._lock:
                if (sample_id, token) not in self._due:
                    continue  # its step ended meanwhile
                if live:
                    self._due[(sample_id, token)] = time.monotonic() + lease / 3
                else:  # taken over, or ran out: no longer renewed
                    del self._due[(sample_id, token)]


RENEWER = LeaseRenewer()


def frozen_model(run: Run, platform: str) -> str | None:
    """The model the run froze for the platform at launch (None for runs launched before
    models were frozen: the connector's configured model)."""
    return RunConfig.of(run).model_for(platform)


def request_for(sample: Sample, idempotency_key: str) -> SampleRequest:
    config = RunConfig.of(sample.run)
    slot = (sample.platform, sample.device, sample.region, sample.mode)
    language = next(
        (t.language for t in config.targets if (t.platform, t.device, t.region, t.mode) == slot),
        "",
    )
    return SampleRequest(
        language=language,
        model=frozen_model(sample.run, sample.platform),
        sample_id=sample.pk,
        idempotency_key=idempotency_key,
        question=sample.question_revision.text,
        device=sample.device,
        region=sample.region,
        mode=sample.mode,
        screenshot=config.wants_screenshots,
    )


# --- collecting an answer: analysis and evidence ------------------------------------------


def analyse_inline(sample: Sample, result: NormalizedResult) -> AnalysisAhead | None:
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


def verdict_for(ahead: AnalysisAhead | None, capture: Capture) -> Verdict | None:
    """The analysis derived ahead, for the capture just written (None: the analysis step)."""
    return None if ahead is None else ahead.verdict_for(capture)


def queue_charge(sample: Sample, verdict: Verdict | None) -> None:
    """A valid answer's charge: posted with the run's other charges by the dispatcher's next
    tick, or when the run finishes (docs/decisions.md, settlement off the hot account rows)."""
    if charge_rows(sample, verdict):
        billing.queue_capture(run_id=sample.run_id, sample_id=sample.pk)


def charge_rows(sample: Sample, verdict: Verdict | None) -> list[Model]:
    """`queue_charge`'s row, not yet written (for an outcome written in one statement; skip it
    on conflict): none unless the answer is valid."""
    if verdict is None or not verdict.valid:
        return []
    return [billing.pending_capture(run_id=sample.run_id, sample_id=sample.pk)]


def error_class_of(result: NormalizedResult) -> ErrorClass:
    return ErrorClass((result.error or {}).get("class", ErrorClass.TRUNCATED))


def error_message_of(result: NormalizedResult, default: str = "") -> str:
    return str((result.error or {}).get("message", default))[:2000]


def store_unavailable(error: BaseException) -> bool:
    """The evidence store (S3 or its filesystem) or the database could not be reached, or
    said it is overloaded: an outage to wait out, not a step that keeps failing."""
    if isinstance(error, ClientError):  # the store answered: only its 5xx mean "try later"
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return int(status) >= 500
    return isinstance(
        error, StoreConnectionError | HTTPClientError | OSError | OperationalError | InterfaceError
    )


def archive(sample: Sample, result: NormalizedResult) -> evidence_services.ArchivedResult:
    return evidence_services.archive_objects(
        result=result,
        tenant=RunConfig.of(sample.run).tenant,
        run_id=str(sample.run_id),
        sample_id=sample.pk,
        revision=evidence_services.next_revision(sample_id=sample.pk),
    )


def evidence_of(s: Sample, result: NormalizedResult) -> Evidence:
    """How the answer's evidence settles: partial when the upstream says so, or when a
    screenshot the campaign wants and the platform takes did not come."""
    missing = [w for w in result.warnings if w.endswith("_UNAVAILABLE")]
    if result.evidence_state == "partial" or missing:
        return Evidence(partial_reason=", ".join(missing) or "partial evidence")
    if (
        RunConfig.of(s.run).wants_screenshots
        and not any(a.kind == "screenshot" for a in result.attachments)
        and connector(s.platform).capabilities().screenshots
    ):
        return Evidence(partial_reason="SCREENSHOT_UNAVAILABLE")
    return STORED


def wants_rendered_screenshot(sample: Sample) -> bool:
    """Direct model APIs have no screen to capture: when the campaign asks for screenshots we
    render an evidence page of the captured answer and photograph it."""
    if not RunConfig.of(sample.run).wants_screenshots:
        return False
    capabilities = connector(sample.platform).capabilities()
    return not capabilities.asynchronous and not capabilities.screenshots
