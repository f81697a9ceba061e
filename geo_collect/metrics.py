"""Prometheus metric families recorded by the processes (workers, dispatcher, web).

Every process of an installation writes to one shared folder (prometheus_client's
multiprocess mode, `PROMETHEUS_MULTIPROC_DIR`, set in geo_collect/settings.py before this
module is imported); `/metrics` adds them up (ops/views.py). Gauges read from the database
are computed at scrape time in ops/collectors.py. The README's "Operations" section lists
every family.

Only primitives cross this module's boundary (no models), so any layer can record.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from prometheus_client import Counter, Histogram

_WAIT_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
_CALL_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)

QUEUE_WAIT = Histogram(
    "geo_queue_wait_seconds",
    "Time from a step being due to it being claimed by the dispatcher.",
    ["platform", "step"],
    buckets=_WAIT_BUCKETS,
)
ACCEPTANCE_LATENCY = Histogram(
    "geo_acceptance_latency_seconds",
    "Time from an attempt's start (submit) to the upstream accepting it.",
    ["platform"],
    buckets=_CALL_BUCKETS,
)
STEP_DURATION = Histogram(
    "geo_step_duration_seconds",
    "Wall time of one executed step in a worker.",
    ["platform", "step", "outcome"],
    buckets=_CALL_BUCKETS,
)
UPSTREAM_RESPONSES = Counter(
    "geo_upstream_responses",
    "Upstream answers to submit attempts, by HTTP status (or none) and error class.",
    ["platform", "status", "error_class"],
)
RETRIES = Counter(
    "geo_retries",
    "Steps given back to be tried again later, by the reason.",
    ["platform", "step", "reason"],
)
STALE_WRITES = Counter(
    "geo_stale_writes_refused",
    "Writes refused because their fencing token was no longer current (table StaleWrite has "
    "each one with its operation).",
)
LEASES_EXPIRED = Counter(
    "geo_leases_expired",
    "Leases that ran out (the worker died or stalled) and were made claimable again.",
)
RUNS_FINISHED = Counter(
    "geo_runs_finished",
    "Runs that ended, by outcome.",
    ["outcome"],
)
EVIDENCE_RECORDED = Counter(
    "geo_evidence_recorded",
    "Samples whose evidence was settled, by state (stored, partial, failed).",
    ["platform", "state"],
)


class ClaimLike(Protocol):
    @property
    def platform(self) -> str: ...
    @property
    def step(self) -> str: ...
    @property
    def waited_seconds(self) -> float: ...


def observe_claims(claims: Iterable[ClaimLike]) -> None:
    for claim in claims:
        QUEUE_WAIT.labels(claim.platform, claim.step).observe(max(0.0, claim.waited_seconds))


def stale_write_refused() -> None:
    STALE_WRITES.inc()


def leases_expired(count: int) -> int:
    if count:
        LEASES_EXPIRED.inc(count)
    return count


def run_finished(*, outcome: str) -> None:
    RUNS_FINISHED.labels(outcome).inc()
