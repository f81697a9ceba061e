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

from prometheus_client import Counter, Gauge, Histogram

from . import metric_files

metric_files.preallocate()  # before the first family: no metrics file may ever SIGBUS us

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

LEADER_TAKEOVERS = Counter(
    "geo_leader_takeovers",
    "Leader leases taken over by a standby (the leader stopped renewing, or its session ended).",
    ["role"],
)
LEADERSHIP_LOST = Counter(
    "geo_leadership_lost",
    "Times a leader found at its renewal that its lease had been taken over (it stood down).",
    ["role"],
)
LEADING = Gauge(
    "geo_leading",
    "1 in the process that holds the role's leader lease, 0 in a standby (one series per pid).",
    ["role"],
    multiprocess_mode="liveall",
)
METRICS_UNRECORDED = Counter(
    "geo_metrics_unrecorded",
    "Times a process found no room under PROMETHEUS_MULTIPROC_DIR for a new series and went on "
    "without it (geo_collect/metric_files.py; logged once per process).",
)
metric_files.on_unrecorded.append(METRICS_UNRECORDED.inc)
CIRCUIT_CHANGES = Counter(
    "geo_circuit_changes",
    "Circuit changes per platform and egress, by the state entered (open, half_open, closed).",
    ["platform", "egress", "state"],
)
DATABASE_OUTAGES = Counter(
    "geo_database_outages",
    "Database outages a process rode out (the database unreachable, then reachable again).",
    ["process"],
)
OUTBOX_REPUBLISHED = Counter(
    "geo_outbox_republished",
    "Outbox messages published again: published, not completed by their consumer within "
    "GEO_OUTBOX_REDELIVER_SECONDS (the broker forgot them, or the consumer keeps failing).",
    ["task"],
)
HELD_RUNS_SETTLED = Counter(
    "geo_held_runs_settled",
    "Finished runs the dispatcher's sweep settled because they still held money with no "
    "settlement in progress (their run-finished event was lost or settled too little).",
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


def leadership_taken(*, role: str) -> None:
    LEADER_TAKEOVERS.labels(role).inc()


def leadership_lost(*, role: str) -> None:
    LEADERSHIP_LOST.labels(role).inc()


def leading(*, role: str, leads: bool) -> None:
    LEADING.labels(role).set(1 if leads else 0)


def database_outage(*, process: str) -> None:
    DATABASE_OUTAGES.labels(process).inc()


def circuit_changed(*, platform: str, egress: str, state: str) -> None:
    CIRCUIT_CHANGES.labels(platform, egress, state).inc()


def outbox_republished(*, task: str) -> None:
    OUTBOX_REPUBLISHED.labels(task).inc()


def held_runs_settled(count: int) -> int:
    if count:
        HELD_RUNS_SETTLED.inc(count)
    return count
