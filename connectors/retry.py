"""The one retry policy for every platform (docs/architecture.md), and in-process rate limiting.

`RetryPolicy.decide` only says what to do next; the caller (the sampling worker) sleeps or
reschedules, records the attempt, and routes "verify" and "review" decisions to recovery.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .base import ErrorClass, UpstreamError

# What a decision asks the caller to do.
RETRY = "retry"  # ask the upstream again after delay_seconds
POLL = "poll"  # keep the upstream id, poll again after delay_seconds
VERIFY = "verify"  # the request may have been accepted: look it up before any retry
REVIEW = "review"  # keep the raw response for a human; never re-ask
FAIL = "fail"  # give up with the reason

_NEVER_RETRIED = frozenset(
    {ErrorClass.INVALID, ErrorClass.AUTH, ErrorClass.UNSUPPORTED, ErrorClass.UPSTREAM_FAILED}
)
# Re-asking is safe for these: nothing was accepted, or what was accepted is gone for good.
_BACKOFF_RETRIED = frozenset({ErrorClass.TRANSIENT, ErrorClass.TRUNCATED, ErrorClass.LOST})


@dataclass(frozen=True)
class RetryDecision:
    retry: bool
    delay_seconds: float
    reason: str
    action: str = FAIL  # RETRY | POLL | VERIFY | REVIEW | FAIL


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 5
    base: float = 1.0
    max_delay: float = 60.0
    max_total_seconds: float = 900.0

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
    ) -> RetryDecision:
        """What to do after attempt `attempt_no` (1-based) failed with `error`, `elapsed_seconds`
        after the first attempt started."""
        rng = rng or random.Random()
        error_class = error.error_class if isinstance(error, UpstreamError) else error
        hint = error.retry_after if isinstance(error, UpstreamError) else None
        verdict = error.should_retry if isinstance(error, UpstreamError) else None

        if error_class is ErrorClass.ACCEPTANCE_UNKNOWN:
            return RetryDecision(
                False, 0.0, "verify: the request was sent but no answer came back", VERIFY
            )
        if error_class is ErrorClass.PARSE_FAILED:
            return RetryDecision(False, 0.0, "answer could not be parsed: keep raw, review", REVIEW)
        if error_class is ErrorClass.POLL_FAILED:
            return self._within_budget(self.backoff(attempt_no, rng), elapsed_seconds, POLL)
        if verdict is False:
            return RetryDecision(False, 0.0, "upstream said x-should-retry: false", FAIL)
        if error_class in _NEVER_RETRIED and verdict is not True:
            return RetryDecision(False, 0.0, f"{error_class.value} is not retried", FAIL)
        if attempt_no >= self.max_attempts:
            return RetryDecision(False, 0.0, f"{attempt_no} attempts used", FAIL)
        if error_class is ErrorClass.RATE_LIMITED and hint is not None:
            return self._honour_hint(hint, elapsed_seconds, rng)
        return self._within_budget(self.backoff(attempt_no, rng), elapsed_seconds, RETRY)

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
                False,
                0.0,
                f"rate limited: the retry hint of {hint:.1f}s is past the retry budget of "
                f"{self.max_total_seconds:.0f}s",
                FAIL,
            )
        return self._within_budget(delay, elapsed_seconds, RETRY, f"rate limited: wait {hint:.3f}s")

    def _within_budget(
        self, delay: float, elapsed_seconds: float, action: str, reason: str = ""
    ) -> RetryDecision:
        if elapsed_seconds + delay > self.max_total_seconds:
            return RetryDecision(
                False, 0.0, f"retry budget of {self.max_total_seconds:.0f}s exhausted", FAIL
            )
        return RetryDecision(True, delay, reason or f"{action} after {delay:.2f}s", action)


DEFAULT_POLICY = RetryPolicy()


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
