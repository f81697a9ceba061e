"""What a worker records around each step: the step's duration and outcome, retries,
acceptance latency, upstream responses and settled evidence (geo_collect/metrics.py), and the
sample's context on every log line it writes meanwhile (geo_collect/logs.py).

Two small reads of the sample (before, shared with the step runner, and after) let the step
code stay free of metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from geo_collect import logs, metrics
from pipeline.execution import load_for_step
from sampling.models import Attempt, EvidenceState, Sample, Step, SubmissionState
from sampling.plainsql import converted


@dataclass(frozen=True)
class _Seen:
    run_id: str
    platform: str
    step: str
    attempts: int
    submission_state: str
    evidence_state: str
    accepted_at: datetime | None


def _seen(sample_id: int) -> _Seen | None:
    row = (
        Sample.objects.filter(pk=sample_id)
        .values_list(
            "run_id",
            "platform",
            "step",
            "attempts",
            "submission_state",
            "evidence_state",
            "accepted_at",
        )
        .first()
    )
    return None if row is None else _Seen(str(row[0]), *row[1:])


def _seen_in(sample: Sample) -> _Seen:
    return _Seen(
        str(sample.run_id),
        sample.platform,
        sample.step,
        sample.attempts,
        sample.submission_state,
        sample.evidence_state,
        sample.accepted_at,
    )


def observe_step(run: Callable[..., str], *, sample_id: int, token: int, worker: str) -> str:
    """Run one step (`run` is the step runner, given the sample as read here: `loaded=`) and
    record what it did."""
    logs.clear()
    # Read once, as the step runner needs it, and handed to it: the step does not read it again.
    sample = load_for_step(sample_id)
    before = None if sample is None else _seen_in(sample)
    if before is not None:
        logs.bind(
            run_id=before.run_id,
            sample_id=sample_id,
            token=token,
            platform=before.platform,
            step=before.step,
            # A submit makes the next attempt; other steps work under the latest one.
            attempt_no=before.attempts + (before.step == Step.SUBMIT) or None,
        )
    started = time.perf_counter()
    outcome = "error"
    try:
        outcome = run(sample_id=sample_id, token=token, worker=worker, loaded=sample)
        return outcome
    finally:
        if before is not None:
            _record(sample_id, before, outcome, time.perf_counter() - started)


def observe_batch(
    run: Callable[..., dict[int, str]], *, held: list[tuple[int, int]], worker: str
) -> dict[int, str]:
    """A batch submit (`run` is the batch runner): each sample's step is recorded as if it had
    run alone, with the batch's time."""
    logs.clear()
    before = {sample_id: _seen(sample_id) for sample_id, _ in held}
    started = time.perf_counter()
    outcomes: dict[int, str] = {}
    try:
        outcomes = run(held=held, worker=worker)
        return outcomes
    finally:
        seconds = time.perf_counter() - started
        for sample_id, seen in before.items():
            if seen is not None:
                _record(sample_id, seen, outcomes.get(sample_id, "error"), seconds)


def _record(sample_id: int, before: _Seen, outcome: str, seconds: float) -> None:
    metrics.STEP_DURATION.labels(before.platform, before.step, outcome).observe(seconds)
    if outcome.startswith(("retry:", "retry-later:")):
        reason = outcome.split(":", 1)[1]
        metrics.RETRIES.labels(before.platform, before.step, reason).inc()
    after = _after(sample_id)
    if after is None:
        return
    attempt = after.attempt
    if after.attempts > before.attempts and attempt is not None:  # an upstream call, recorded
        _record_attempt(before.platform, attempt)
    accepted_at = after.accepted_at
    accepted_now = before.submission_state != SubmissionState.ACCEPTED
    if accepted_now and accepted_at is not None and attempt is not None:
        latency = (accepted_at - attempt.started_at).total_seconds()
        metrics.ACCEPTANCE_LATENCY.labels(before.platform).observe(max(0.0, latency))
    if before.evidence_state == EvidenceState.PENDING != after.evidence_state:
        metrics.EVIDENCE_RECORDED.labels(before.platform, after.evidence_state).inc()


@dataclass(frozen=True)
class _Attempt:
    attempt_no: int
    status: str
    status_code: int | None
    error_class: str
    request_id: str
    started_at: datetime


@dataclass(frozen=True)
class _After:
    attempts: int
    evidence_state: str
    accepted_at: datetime | None
    attempt: _Attempt | None  # the latest


# The sample's state after the step and its latest attempt (NULLs when it has none), in one
# plain statement: it runs after every step, so it skips the ORM's compilation.
_AFTER = f"""SELECT s.attempts, s.evidence_state, s.accepted_at, a.attempt_no, a.status,
       a.status_code, a.error_class, a.request_id, a.started_at
  FROM {Sample._meta.db_table} s
  LEFT JOIN {Attempt._meta.db_table} a ON a.sample_id = s.id AND a.attempt_no = (
       SELECT max(attempt_no) FROM {Attempt._meta.db_table} WHERE sample_id = s.id)
 WHERE s.id = %s"""


# The fields of _AFTER's columns, in order: their values are read as the ORM reads them.
_AFTER_FIELDS = [(Sample, name) for name in ("attempts", "evidence_state", "accepted_at")] + [
    (Attempt, name)
    for name in ("attempt_no", "status", "status_code", "error_class", "request_id", "started_at")
]


def _after(sample_id: int) -> _After | None:
    """The sample's state after the step and its latest attempt, in one read."""
    with connection.cursor() as cursor:
        cursor.execute(_AFTER, [sample_id])
        row = cursor.fetchone()
    if row is None:
        return None
    # The fields' converters (sampling/plainsql.py): on SQLite, timestamps come back naive UTC
    # or as text.
    attempts, evidence_state, accepted_at, *latest = converted(row, _AFTER_FIELDS)
    attempt = None if latest[0] is None else _Attempt(*latest)
    return _After(attempts, evidence_state, accepted_at, attempt)


def _record_attempt(platform: str, attempt: _Attempt) -> None:
    if attempt.status == "started":
        return
    logs.bind(attempt_no=attempt.attempt_no, request_id=attempt.request_id)
    status = str(attempt.status_code) if attempt.status_code else "none"
    metrics.UPSTREAM_RESPONSES.labels(platform, status, attempt.error_class or "ok").inc()
