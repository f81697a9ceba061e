"""The one retry policy for every platform and every step (docs/architecture.md), and
in-process rate limiting.

`RetryPolicy` only says what to do next, as a `RetryDecision`: the pipeline reads its action
and delay (pipeline/execution.py) and the sample's step outcome applies it (sampling/steps.py):
reschedule, keep polling, verify, park for review, or fail with the reason.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .base import ErrorClass, UpstreamError

# What a decision asks the caller to do.
RETRY = "retry"  # do the step again after delay_seconds (a submit asks the upstream again)
POLL = "poll"  # keep the upstream id, poll again after delay_seconds
VERIFY = "verify"  # the request may have been accepted: look it up before any retry
REVIEW = "review"  # keep the raw response for a human; never re-ask
REASK = "reask"  # an outcome that cannot be known: ask again as a new attempt (by policy)
FAIL = "fail"  # give up with the reason

_NEVER_RETRIED = frozenset(
    {ErrorClass.INVALID, ErrorClass.AUTH, ErrorClass.UNSUPPORTED, ErrorClass.UPSTREAM_FAILED}
)
# Re-asking is safe for these: nothing was accepted, or what was accepted is gone for good.
_BACKOFF_RETRIED = frozenset(
    {ErrorClass.TRANSIENT, ErrorClass.UNREACHABLE, ErrorClass.TRUNCATED, ErrorClass.LOST}
)


# Reasons with which the product, not the upstream, gave up on a task the upstream accepted:
# the task may still be there, so a resume polls it again instead of submitting a second one
# (pipeline/resume.py). "poll failed " is the reason of the poll cap before issue 30.
GAVE_UP_POLLING = "poll deadline passed"
GAVE_UP_FETCHING = "evidence fetch failed"
GAVE_UP_ON_ACCEPTED = (GAVE_UP_POLLING, GAVE_UP_FETCHING, "poll failed ")


@dataclass(frozen=True)
class RetryDecision:
    action: str  # RETRY | POLL | VERIFY | REVIEW | REASK | FAIL
    delay_seconds: float
    reason: str
    # False: the claim that met this error is not held against the step's poison cap (the
    # platform was unreachable, or a poll bounded by its deadline instead).
    counted: bool = True

    @property
    def retry(self) -> bool:
        """The step is done again later (RETRY or POLL), after `delay_seconds`."""
        return self.action in (RETRY, POLL)


@dataclass(frozen=True)
class RetryPolicy:
    """Submit: bounded by attempts and a total time budget (`decide`). Poll, verify and
    evidence fetches: bounded by how often the step was claimed (`max_step_claims`, the poison
    cap), since they never re-ask a question. Archiving a kept answer: `after_archive_error`
    (an outage is waited out), keeping it: `after_inbox_write_error`. Any step that raised:
    `after_step_error`."""

    max_attempts: int = 5
    base: float = 1.0
    max_delay: float = 60.0
    max_total_seconds: float = 900.0
    # Poll interval grows with the task's age: quick answers are picked up quickly, slow ones
    # do not hammer the provider.
    poll_min_seconds: float = 0.5
    poll_max_seconds: float = 30.0
    verify_delay_seconds: float = 5.0
    evidence_delay_seconds: float = 2.0
    max_step_claims: int = 8
    # How long an accepted task is polled through failed polls, from its acceptance (time, not
    # a count of failed polls); an unreachable platform never ends it.
    poll_deadline_seconds: float = 3600.0
    # How long a worker holding an answer keeps trying to write it to the inbox.
    inbox_write_seconds: float = 60.0

    def backoff(self, attempt_no: int, rng: random.Random) -> float:
        """min(max_delay, base·2^(n-1)) plus up to `base` of jitter so workers spread out."""
        exponential = min(self.max_delay, self.base * 2 ** max(0, attempt_no - 1))
        return exponential + rng.uniform(0, self.base)

    def decide(
        self,
        error: UpstreamError | ErrorClass,
        *,
        attempt_no: int,
        elapsed_seconds: float,
        rng: random.Random | None = None,
        unreachable_before: int = 0,
    ) -> RetryDecision:
        """What to do after attempt `attempt_no` (1-based) failed with `error`, `elapsed_seconds`
        after the first attempt started. The attempt budget counts the attempts the platform
        could have answered: the `unreachable_before` earlier ones, and this one if it is
        UNREACHABLE, made no connection and are not counted (the total time budget still is);
        the backoff grows with every attempt all the same."""
        rng = rng or random.Random()
        error_class = error.error_class if isinstance(error, UpstreamError) else error
        hint = error.retry_after if isinstance(error, UpstreamError) else None
        verdict = error.should_retry if isinstance(error, UpstreamError) else None

        if error_class is ErrorClass.ACCEPTANCE_UNKNOWN:
            return RetryDecision(
                VERIFY, 0.0, "verify: the request was sent but no answer came back"
            )
        if error_class is ErrorClass.PARSE_FAILED:
            return RetryDecision(REVIEW, 0.0, "answer could not be parsed: keep raw, review")
        if verdict is False:
            return RetryDecision(FAIL, 0.0, "upstream said x-should-retry: false")
        if error_class in _NEVER_RETRIED and verdict is not True:
            return RetryDecision(FAIL, 0.0, f"{error_class.value} is not retried")
        unreachable = error_class is ErrorClass.UNREACHABLE
        answerable = attempt_no - unreachable_before - (1 if unreachable else 0)
        if not unreachable and answerable >= self.max_attempts:
            return RetryDecision(FAIL, 0.0, f"{answerable} attempts used")
        if error_class is ErrorClass.RATE_LIMITED and hint is not None:
            return self._honour_hint(hint, elapsed_seconds, rng)
        decision = self._within_budget(self.backoff(attempt_no, rng), elapsed_seconds, RETRY)
        if unreachable and decision.retry:  # no connection: not a claim that keeps failing
            return RetryDecision(RETRY, decision.delay_seconds, "unreachable", counted=False)
        return decision

    def _honour_hint(
        self, hint: float, elapsed_seconds: float, rng: random.Random
    ) -> RetryDecision:
        # Retrying earlier than told only earns another 429, so the hint is never shortened.
        # A hint longer than the per-attempt cap (max_delay) is still honoured: the caller
        # schedules the sample for later in the database rather than sleeping; only a wait
        # past the total budget gives up, with that reason.
        # A little jitter above the hint keeps many workers from returning in the same instant.
        delay = hint + rng.uniform(0, min(1.0, hint * 0.1))
        if elapsed_seconds + delay > self.max_total_seconds:
            return RetryDecision(
                FAIL,
                0.0,
                f"rate limited: the retry hint of {hint:.1f}s is past the retry budget of "
                f"{self.max_total_seconds:.0f}s",
            )
        return self._within_budget(delay, elapsed_seconds, RETRY, f"rate limited: wait {hint:.3f}s")

    def _within_budget(
        self, delay: float, elapsed_seconds: float, action: str, reason: str = ""
    ) -> RetryDecision:
        if elapsed_seconds + delay > self.max_total_seconds:
            return RetryDecision(
                FAIL, 0.0, f"retry budget of {self.max_total_seconds:.0f}s exhausted"
            )
        return RetryDecision(action, delay, reason or f"{action} after {delay:.2f}s")

    # --- the steps after acceptance, and any step that raised --------------------------------

    def claimed_too_often(self, claims: int) -> bool:
        """A step claimed more often than the cap is poison (it keeps crashing its worker or
        timing out): it is parked with the reason, for a person."""
        return claims > self.max_step_claims

    def poll_delay(self, *, age_seconds: float, hint: float | None = None) -> float:
        """When to poll an accepted task again: the upstream's hint, or a tenth of the task's
        age within [poll_min_seconds, poll_max_seconds]."""
        if hint:
            return hint
        return max(self.poll_min_seconds, min(self.poll_max_seconds, age_seconds / 10))

    def next_poll(self, *, age_seconds: float, hint: float | None = None) -> RetryDecision:
        """The task is queued or running upstream: poll again."""
        delay = self.poll_delay(age_seconds=age_seconds, hint=hint)
        return RetryDecision(POLL, delay, f"poll after {delay:.2f}s")

    def after_poll_error(self, error: UpstreamError, *, age_seconds: float) -> RetryDecision:
        """A poll failed: keep the upstream id and poll again later, until the task's deadline
        (`poll_deadline_seconds` after its acceptance, however many polls failed); then fail
        with the reason. A platform that cannot be reached is never a verdict on the task: it
        is polled again whatever its age. No failed poll counts towards the poison cap."""
        unreachable = error.error_class is ErrorClass.UNREACHABLE
        if not unreachable and age_seconds >= self.poll_deadline_seconds:
            return RetryDecision(
                FAIL, 0.0, f"{GAVE_UP_POLLING} ({self.poll_deadline_seconds:.0f}s): {error}"
            )
        delay = self.poll_delay(age_seconds=age_seconds, hint=error.retry_after)
        reason = f"poll failed ({error.error_class.value}): poll again"
        return RetryDecision(POLL, delay, reason, counted=False)

    def after_evidence_error(self, error: UpstreamError, *, claims: int) -> RetryDecision:
        """Fetching an accepted task's evidence failed: fetch again, until the cap. An
        unreachable platform is waited out without counting."""
        delay = error.retry_after or self.evidence_delay_seconds
        if error.error_class is ErrorClass.UNREACHABLE:
            return RetryDecision(RETRY, delay, "evidence fetch: unreachable", counted=False)
        if claims >= self.max_step_claims:
            return RetryDecision(FAIL, 0.0, f"{GAVE_UP_FETCHING}: {error}")
        return RetryDecision(RETRY, delay, f"evidence fetch failed ({error.error_class.value})")

    def after_verify_error(
        self, error: UpstreamError, *, reask_after: float | None = None, age_seconds: float = 0.0
    ) -> RetryDecision:
        """Looking up an uncertain request failed. A platform that cannot look requests up
        never will: a person decides, unless the platform's policy says to ask again
        `reask_after` seconds after the uncertain attempt started (`age_seconds` ago): then
        wait until then (not counted), and ask again. Otherwise look again later (the poison
        cap bounds it; an unreachable platform is waited out without counting)."""
        if error.error_class is ErrorClass.UNSUPPORTED:
            if reask_after is None:
                return RetryDecision(
                    REVIEW, 0.0, "uncertain: platform cannot confirm acceptance; needs review"
                )
            if age_seconds >= reask_after:
                return RetryDecision(
                    REASK, 0.0, f"uncertain for {age_seconds:.0f}s: asked again by policy"
                )
            wait = reask_after - age_seconds
            return RetryDecision(RETRY, wait, f"uncertain: ask again in {wait:.0f}s", counted=False)
        unreachable = error.error_class is ErrorClass.UNREACHABLE
        return RetryDecision(
            RETRY, self.verify_delay_seconds, f"verify failed: {error}", counted=not unreachable
        )

    def after_archive_error(
        self, error: BaseException, *, outage: bool, claims: int, age_seconds: float
    ) -> RetryDecision:
        """Archiving an answer already kept in the answer inbox failed. Its answer is never
        asked again: the archive step is done again. An outage (the evidence store or the
        database unreachable) is waited out, however long, with a delay growing with the
        answer's age up to `max_delay`; any other error is bounded by the poison cap and then
        parked for a person, the answer still kept."""
        if outage:
            delay = max(self.evidence_delay_seconds, min(self.max_delay, age_seconds / 4))
            return RetryDecision(
                RETRY, delay, f"evidence store unavailable: archive again ({error})"
            )
        if claims >= self.max_step_claims:
            return RetryDecision(
                REVIEW, 0.0, f"archive failed {claims} times, answer kept: {error}"[:200]
            )
        delay = min(self.max_delay, 2.0**claims)
        return RetryDecision(RETRY, delay, f"archive failed: retry after {delay:.0f}s")

    def after_inbox_write_error(self, *, tries: int, elapsed_seconds: float) -> RetryDecision:
        """The database failed the write that keeps an answer just read. The worker holds the
        answer, so it tries again itself, with backoff (0.25 s doubling to 8 s), for up to
        `inbox_write_seconds`; past that the answer is lost with the worker's attempt (the
        sample is verified, as for a worker that died mid-call)."""
        delay = min(8.0, 0.25 * 2 ** max(0, tries - 1))
        if elapsed_seconds + delay > self.inbox_write_seconds:
            return RetryDecision(
                FAIL, 0.0, f"answer not kept: the database failed for {elapsed_seconds:.0f}s"
            )
        return RetryDecision(RETRY, delay, f"keep the answer again after {delay:.2f}s")

    def after_step_error(self, *, claims: int) -> RetryDecision:
        """A step raised (a bug, an unexpected upstream shape): give the lease back with an
        exponential backoff instead of letting it run out; the poison cap parks it."""
        delay = min(self.max_delay, 2.0**claims)
        return RetryDecision(RETRY, delay, f"step failed: retry after {delay:.0f}s")


class TokenBucket:
    """`rate` tokens per second, at most `capacity` banked. Thread-safe."""

    def __init__(
        self, rate: float, capacity: float, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate <= 0 or capacity <= 0:
            raise ValueError("rate and capacity must be positive")
        self.rate = rate
        self.capacity = capacity
        self._clock = clock
        self._tokens = capacity
        self._updated = clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._updated) * self.rate)
        self._updated = now

    def try_acquire(self, tokens: float = 1.0) -> bool:
        with self._lock:
            self._refill()
            if self._tokens >= tokens:
                self._tokens -= tokens
                return True
            return False

    def take(self, wanted: int) -> int:
        """Up to `wanted` whole tokens, as many as are banked now."""
        with self._lock:
            self._refill()
            granted = min(wanted, int(self._tokens))
            self._tokens -= granted
            return max(0, granted)

    def give_back(self, tokens: float) -> None:
        """Return tokens taken but not used (work claimed was less than granted)."""
        with self._lock:
            self._tokens = min(self.capacity, self._tokens + tokens)

    def seconds_until_available(self, tokens: float = 1.0) -> float:
        with self._lock:
            self._refill()
            return max(0.0, (tokens - self._tokens) / self.rate)


OPERATIONS = frozenset({"submit", "poll", "screenshot"})


@dataclass(frozen=True)
class RateLimit:
    per_second: float
    burst: float


@dataclass
class RateLimiter:
    """One token bucket per (platform, operation), so a slow or limited platform and its
    screenshots never consume another's budget. Unconfigured pairs use `default`."""

    limits: Mapping[tuple[str, str], RateLimit] = field(default_factory=dict)
    default: RateLimit | None = None  # None: unconfigured pairs are not limited
    clock: Callable[[], float] = time.monotonic
    _buckets: dict[tuple[str, str], TokenBucket] = field(default_factory=dict, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def _bucket(self, platform: str, operation: str) -> TokenBucket | None:
        if operation not in OPERATIONS:
            raise ValueError(f"unknown operation {operation!r} (known: {sorted(OPERATIONS)})")
        key = (platform, operation)
        limit = self.limits.get(key, self.default)
        if limit is None:
            return None
        with self._lock:
            if key not in self._buckets:
                self._buckets[key] = TokenBucket(limit.per_second, limit.burst, clock=self.clock)
            return self._buckets[key]

    def try_acquire(self, platform: str, operation: str) -> bool:
        bucket = self._bucket(platform, operation)
        return bucket is None or bucket.try_acquire()

    def wait_seconds(self, platform: str, operation: str) -> float:
        bucket = self._bucket(platform, operation)
        return 0.0 if bucket is None else bucket.seconds_until_available()

    def acquire(self, platform: str, operation: str, *, timeout: float) -> bool:
        """Block up to `timeout` seconds for a token."""
        deadline = self.clock() + timeout
        while not self.try_acquire(platform, operation):
            wait = self.wait_seconds(platform, operation)
            if self.clock() + wait > deadline:
                return False
            time.sleep(max(wait, 0.001))
        return True
