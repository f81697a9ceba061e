"""A step's outcome (sampling/steps.py): one compare-and-set write of exactly the fields it
changed, and its metrics counted where it happens, without reading the sample again."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from connectors.base import ErrorClass, PollOutcome, SubmitOutcome, UpstreamError
from connectors.retry import RETRY, RetryDecision
from geo_collect import metrics
from sampling.models import Sample, StaleWrite, Step
from sampling.steps import fenced_step
from sampling.transitions import StaleToken
from tests.pipeline.test_execution import (  # noqa: F401
    _accepted,
    _claim,
    _result,
    _sample,
    _step,
    upstream,
)

pytestmark = pytest.mark.django_db


def _count(metric: Any, *labels: str) -> float:
    """The metric's value in this process: a counter's total, a histogram's observations."""
    child = metric.labels(*labels)
    [family] = child.collect()
    wanted = ("_total", "_count")
    return sum(s.value for s in family.samples if s.name.endswith(wanted))


def test_a_retried_submit_counts_the_retry_and_the_upstream_response(upstream: Any) -> None:  # noqa: F811
    upstream(submit=UpstreamError(ErrorClass.RATE_LIMITED, "slow down", status_code=429))
    retries = _count(metrics.RETRIES, "openai", "submit", "rate_limited")
    responses = _count(metrics.UPSTREAM_RESPONSES, "openai", "429", "rate_limited")

    outcome, _ = _step(_sample())

    assert outcome == "retry:rate_limited"
    assert _count(metrics.RETRIES, "openai", "submit", "rate_limited") == retries + 1
    assert _count(metrics.UPSTREAM_RESPONSES, "openai", "429", "rate_limited") == responses + 1


def test_an_acceptance_observes_its_latency_once(upstream: Any) -> None:  # noqa: F811
    upstream(asynchronous=True, submit=SubmitOutcome(upstream_id="task-9"))
    observed = _count(metrics.ACCEPTANCE_LATENCY, "collector")

    outcome, _ = _step(_sample("collector"))

    assert outcome == "accepted"
    assert _count(metrics.ACCEPTANCE_LATENCY, "collector") == observed + 1
    assert _count(metrics.UPSTREAM_RESPONSES, "collector", "none", "ok") >= 1


def test_settled_evidence_is_counted_by_its_state(upstream: Any) -> None:  # noqa: F811
    upstream(asynchronous=True, fetch_evidence=_result())
    stored = _count(metrics.EVIDENCE_RECORDED, "collector", "stored")

    outcome, sample = _step(_accepted(), Step.EVIDENCE)

    assert (outcome, sample.evidence_state) == ("evidence-stored", "stored")
    assert _count(metrics.EVIDENCE_RECORDED, "collector", "stored") == stored + 1


def test_a_poll_given_back_counts_a_retry_of_the_poll_step(upstream: Any) -> None:  # noqa: F811
    upstream(asynchronous=True, poll=UpstreamError(ErrorClass.TRANSIENT, "503"))
    retries = _count(metrics.RETRIES, "collector", "poll", "poll")

    outcome, _ = _step(_accepted(), Step.POLL)

    assert outcome == "retry-later:poll"
    assert _count(metrics.RETRIES, "collector", "poll", "poll") == retries + 1


def test_a_poll_that_keeps_waiting_counts_no_retry(upstream: Any) -> None:  # noqa: F811
    upstream(asynchronous=True, poll=PollOutcome(state="running"))
    retries = _count(metrics.RETRIES, "collector", "poll", "poll")

    outcome, _ = _step(_accepted(), Step.POLL)

    assert outcome == "poll:running"
    assert _count(metrics.RETRIES, "collector", "poll", "poll") == retries


def test_an_outcome_writes_only_the_fields_it_changed() -> None:
    sample = _sample()
    claim = _claim(sample)
    decision = RetryDecision(RETRY, 3.0, "test")

    with (
        CaptureQueriesContext(connection) as queries,
        fenced_step(sample_id=sample.pk, token=claim.token, operation="test") as step,
    ):
        step.sample.failure_reason = step.sample.failure_reason  # the same value: not a change
        outcome = step.retry_later(decision)

    [update] = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    assigned = update.split(" SET ", 1)[1].split(" WHERE ", 1)[0]
    columns = {part.split(" = ", 1)[0].strip('"') for part in assigned.split(', "')}
    # Same step again: the step and its claims stay; the queue release and the timestamp move.
    assert columns == {"queue_state", "due_at", "lease_until", "lease_owner", "updated_at"}
    assert outcome == "retry-later:submit"
    written = Sample.objects.get(pk=sample.pk)
    assert (written.step, written.queue_state, written.claims) == ("submit", "ready", 1)
    # Written as the database's time, read back in the same statement.
    assert step.sample.due_at == written.due_at


def test_an_outcome_whose_token_moved_on_is_refused_and_recorded() -> None:
    sample = _sample()
    claim = _claim(sample)
    Sample.objects.filter(pk=sample.pk).update(fencing_token=claim.token + 1)

    with (
        pytest.raises(StaleToken),
        fenced_step(sample_id=sample.pk, token=claim.token, operation="test") as step,
    ):
        step.park(reason="never written")

    assert Sample.objects.get(pk=sample.pk).failure_reason == ""
    assert StaleWrite.objects.get(sample_id=sample.pk).operation == "test"
