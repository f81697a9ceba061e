"""The statements a worker sends per step, on the two collection paths: a regression guard for
the hot path (docs/decisions.md, "A sample's step outcomes have one home").

Counted from the task's entry (`pipeline.tasks.execute_step`: the step recorder, the step, its
fenced writes and the run-end check after commit); the dispatcher's claim is not counted.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.models.functions import Now
from django.test.utils import CaptureQueriesContext

from connectors.base import PollOutcome, SubmitOutcome
from pipeline import circuits, tasks
from sampling.models import Sample, Step
from tests.conftest import launch_funded, make_campaign_data
from tests.pipeline.test_execution import _claim, _result, upstream  # noqa: F401

pytestmark = pytest.mark.django_db

# Upper bounds, per step (docs/decisions.md, "A sample's step outcomes have one home"): a step
# that needs more statements is a regression of the hot path; lower a bound when a change
# saves one.
# The direct answer (docs/decisions.md, "An answer in hand is kept before it is archived", "The
# answer kept in one statement"): begun, kept in the inbox and archived in one statement each
# (`SampleStep.write_at_once`); the rest are reads (the step's load, the next revision, the
# run's analysis set-up on its first answer, the run-end check).
DIRECT_ANSWER_MAX = 12
ACCEPTED_MAX = 10
POLL_MAX = 4
EVIDENCE_MAX = 15


def _one_of_two(platform: str) -> Sample:
    """A sample of a run of two: its step is not the run's last, as nearly every step is not
    (the run's end, settlement included, is counted by tests/billing)."""
    data = make_campaign_data(
        questions=2,
        targets=[{"platform": platform, "device": "desktop", "region": "us", "mode": "web_search"}],
        repeats=1,
    )
    data["screenshot_policy"] = "none"
    return Sample.objects.filter(run=launch_funded(data)).order_by("pk").first()  # type: ignore[return-value]


def _statements(sample: Sample, capture: Any) -> tuple[str, int]:
    """Claim the sample and run its step as the worker task does; the statements it sent."""
    claim = _claim(sample)
    circuits.forget_counted()  # the happy path: this process saw no platform unreachable
    # The run-end check runs after the commit, still in the task: counted too.
    with CaptureQueriesContext(connection) as queries, capture(execute=True):
        outcome = tasks.execute_step(sample.pk, claim.token)
    # Savepoints stand for the transactions' BEGIN and COMMIT, which outside a test's
    # transaction are not statements a capture sees.
    sent = [q["sql"] for q in queries.captured_queries if "SAVEPOINT" not in q["sql"]]
    return outcome, len(sent)


def test_a_direct_answer_analysed_inline_stays_within_its_statement_budget(
    upstream: Any,  # noqa: F811
    django_capture_on_commit_callbacks: Any,
) -> None:
    upstream(submit=SubmitOutcome(upstream_id="resp-1", result=_result()))
    sample = _one_of_two("openai")

    outcome, count = _statements(sample, django_capture_on_commit_callbacks)

    assert outcome == "answered"
    assert Sample.objects.get(pk=sample.pk).step == Step.NONE  # analysed in the same step
    assert count <= DIRECT_ANSWER_MAX, f"direct answer: {count} statements"


def test_each_step_of_a_provider_task_stays_within_its_statement_budget(
    upstream: Any,  # noqa: F811
    django_capture_on_commit_callbacks: Any,
) -> None:
    upstream(
        asynchronous=True,
        submit=SubmitOutcome(upstream_id="task-1"),
        poll=PollOutcome(state="completed"),
        fetch_evidence=_result(),
    )
    sample = _one_of_two("collector")
    counts = {}
    for expected, bound in (
        ("accepted", ACCEPTED_MAX),
        ("poll:completed", POLL_MAX),
        ("evidence-stored", EVIDENCE_MAX),
    ):
        Sample.objects.filter(pk=sample.pk).update(due_at=Now())
        outcome, counts[expected] = _statements(sample, django_capture_on_commit_callbacks)
        assert outcome == expected
        assert counts[expected] <= bound, f"{expected}: {counts[expected]} statements"
    assert Sample.objects.get(pk=sample.pk).step == Step.NONE


def _lease_renewals(sample: Sample, lease_seconds: int, capture: Any) -> tuple[str, int]:
    """Claim the sample for `lease_seconds` and run its step: the lease renewals it sent."""
    from sampling.leases import claim_sample

    claim = claim_sample(sample_id=sample.pk, owner="test", lease_seconds=lease_seconds)
    assert claim is not None
    circuits.forget_counted()
    with CaptureQueriesContext(connection) as queries, capture(execute=True):
        outcome = tasks.execute_step(sample.pk, claim.token)
    renewals = [q for q in queries.captured_queries if "SET lease_until" in q["sql"]]
    return outcome, len(renewals)


def test_a_step_claimed_moments_ago_starts_without_renewing_its_lease(
    upstream: Any,  # noqa: F811
    django_capture_on_commit_callbacks: Any,
    settings: Any,
) -> None:
    """More than two thirds of the lease left (`sampling.steps.FRESH_SHARE`): no renewal
    before the step (one statement and one row version less); the step's renewer and its
    fenced writes look after the lease from there."""
    upstream(submit=SubmitOutcome(upstream_id="resp-1", result=_result()))
    sample = _one_of_two("openai")

    outcome, renewals = _lease_renewals(
        sample, settings.GEO_LEASE_SECONDS, django_capture_on_commit_callbacks
    )

    assert outcome == "answered"
    assert renewals == 0


def test_a_step_whose_message_waited_renews_its_lease_before_working(
    upstream: Any,  # noqa: F811
    django_capture_on_commit_callbacks: Any,
    settings: Any,
) -> None:
    """A third or less of the lease left (its message waited in the queue): renewed first."""
    upstream(submit=SubmitOutcome(upstream_id="resp-1", result=_result()))
    sample = _one_of_two("openai")

    outcome, renewals = _lease_renewals(
        sample, settings.GEO_LEASE_SECONDS // 3, django_capture_on_commit_callbacks
    )

    assert outcome == "answered"
    assert renewals == 1
