"""What a worker records around each step: the step's duration and outcome, retries,
acceptance latency, upstream responses and settled evidence (geo_collect/metrics.py), and the
sample's context on every log line it writes meanwhile (geo_collect/logs.py).

Two small reads of the sample (before and after) let the step code stay free of metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from geo_collect import logs, metrics
from sampling.models import Attempt, EvidenceState, Sample, Step, SubmissionState


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


def observe_step(run: Callable[..., str], *, sample_id: int, token: int, worker: str) -> str:
    """Run one step (`run` is the step runner) and record what it did."""
    logs.clear()
    before = _seen(sample_id)
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
        outcome = run(sample_id=sample_id, token=token, worker=worker)
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
    after = _seen(sample_id)
    if after is None:
        return
    if after.attempts > before.attempts:  # an upstream call was made and recorded
        _record_attempt(sample_id, after)
    if before.submission_state != SubmissionState.ACCEPTED and after.accepted_at is not None:
        _record_acceptance(sample_id, after)
    if before.evidence_state == EvidenceState.PENDING != after.evidence_state:
        metrics.EVIDENCE_RECORDED.labels(after.platform, after.evidence_state).inc()


def _record_attempt(sample_id: int, after: _Seen) -> None:
    attempt = Attempt.objects.filter(sample_id=sample_id).order_by("-attempt_no").first()
    if attempt is None or attempt.status == "started":
        return
    logs.bind(attempt_no=attempt.attempt_no, request_id=attempt.request_id)
    status = str(attempt.status_code) if attempt.status_code else "none"
    metrics.UPSTREAM_RESPONSES.labels(after.platform, status, attempt.error_class or "ok").inc()


def _record_acceptance(sample_id: int, after: _Seen) -> None:
    attempt = Attempt.objects.filter(sample_id=sample_id).order_by("-attempt_no").first()
    if attempt is None or after.accepted_at is None:
        return
    seconds = (after.accepted_at - attempt.started_at).total_seconds()
    metrics.ACCEPTANCE_LATENCY.labels(after.platform).observe(max(0.0, seconds))
