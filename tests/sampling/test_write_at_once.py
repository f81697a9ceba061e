"""An outcome written in one statement with the rows that go with it
(`sampling.steps.step_at_once`, `SampleStep.write_at_once`, on `plainsql.write_if`): the
direct answer kept in the inbox. It writes only while the claim holds and the sample is as the
step left it, and then exactly what the locked path (`fenced_step`) writes."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.models import Model
from django.db.models.functions import Now

from billing.costs import pending_attempt_cost, queue_attempt_cost
from billing.models import PendingAttemptCost
from connectors.base import NormalizedResult, SubmitOutcome
from sampling import inbox
from sampling.leases import claim_sample
from sampling.models import (
    AnswerInbox,
    Attempt,
    AttemptStatus,
    Sample,
    Step,
    SubmissionState,
)
from sampling.plainsql import changed_fields
from sampling.steps import (
    SampleStep,
    begin_attempt_at_once,
    fenced_step,
    load_for_step,
    step_at_once,
)
from tests.conftest import launch_funded, make_campaign_data

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.postgresql("one statement on PostgreSQL; SQLite takes the locked path"),
]
OPENAI = [{"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"}]
ANSWER = NormalizedResult(
    sample_id=None,
    upstream_id="resp-1",
    collection_state="completed",
    evidence_state="stored",
    answer_text="Acme is the best CRM.",
    raw=b"data: Acme is the best CRM.\n\n",
    raw_mime="text/event-stream",
)
OUTCOME = SubmitOutcome(upstream_id="resp-1", request_id="req-1", result=ANSWER)


def _submitting(questions: int = 1) -> list[tuple[Sample, Attempt, int]]:
    """Samples of one run, each claimed, its attempt begun and priced, as a submit leaves it
    when the answer has been read."""
    run = launch_funded(make_campaign_data(questions=questions, targets=OPENAI, repeats=1))
    found = []
    for sample_id in Sample.objects.filter(run=run).order_by("pk").values_list("pk", flat=True):
        claim = claim_sample(sample_id=sample_id, owner="worker-a", lease_seconds=60)
        sample = load_for_step(sample_id)
        assert claim is not None and sample is not None
        attempt = begin_attempt_at_once(sample, token=claim.token, model="gpt-test")
        assert attempt is not None
        attempt.cost, attempt.cost_currency = 123, "USD"
        found.append((sample, attempt, claim.token))
    return found


def _decide(step: SampleStep, attempt: Attempt) -> list[Model]:
    step.close_attempt(attempt, status=AttemptStatus.ACCEPTED, outcome=OUTCOME)
    step.answer_kept(upstream_id="resp-1", answered=True)
    entry = inbox.entry_for(attempt=attempt, result=ANSWER, upstream_id="resp-1")
    return [entry, pending_attempt_cost(run_id=step.sample.run_id, attempt_id=attempt.pk)]


def _keep_at_once(sample: Sample, attempt: Attempt, token: int) -> tuple[bool, list[Model]]:
    step = step_at_once(sample, token=token)
    assert step is not None
    rows = _decide(step, attempt)
    return step.write_at_once(then_insert=rows, skip_conflicts=rows[1:]), rows


def _row(model: type[Model], pk: Any, *leave_out: str) -> dict[str, Any]:
    row = model._default_manager.filter(pk=pk).values().get()
    return {k: v for k, v in row.items() if k not in {"id", *leave_out}}


def test_an_answer_is_kept_with_its_attempt_cost_and_sample_in_one_statement() -> None:
    [(sample, attempt, token)] = _submitting()
    statements: list[str] = []

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if "SAVEPOINT" not in sql:  # a test's transaction: the write sits in a savepoint
            statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        written, [entry, cost] = _keep_at_once(sample, attempt, token)

    assert written and len(statements) == 1
    stored = Sample.objects.get(pk=sample.pk)
    assert (stored.step, stored.submission_state, stored.upstream_id) == (
        Step.ARCHIVE,
        SubmissionState.ACCEPTED,
        "resp-1",
    )
    assert stored.accepted_at is not None and sample.accepted_at == stored.accepted_at
    closed = Attempt.objects.get(pk=attempt.pk)
    assert (closed.status, closed.request_id, closed.cost) == (AttemptStatus.ACCEPTED, "req-1", 123)
    assert closed.finished_at == attempt.finished_at  # the database's time, read back
    kept = AnswerInbox.objects.get(sample_id=sample.pk)
    assert (kept.pk, kept.received_at, bytes(kept.raw)) == (entry.pk, entry.received_at, ANSWER.raw)
    assert PendingAttemptCost.objects.filter(attempt_id=attempt.pk, pk=cost.pk).exists()
    # The instances hold what was written: nothing is left to write.
    assert changed_fields(sample) == [] and changed_fields(attempt) == []


def test_the_one_statement_writes_what_the_locked_path_writes() -> None:
    (fast, fast_attempt, fast_token), (slow, slow_attempt, slow_token) = _submitting(questions=2)
    assert _keep_at_once(fast, fast_attempt, fast_token)[0]
    with fenced_step(sample_id=slow.pk, token=slow_token, operation="answer") as step:
        _decide(step, slow_attempt)  # its rows are written below, as the locked path does
        inbox.keep(attempt=slow_attempt, result=ANSWER, upstream_id="resp-1")
        queue_attempt_cost(run_id=slow.run_id, attempt_id=slow_attempt.pk)

    different = {"question_revision_id", "fencing_token", "lease_until", "accepted_at"}
    different |= {"updated_at", "due_at", "created_at", "repeat_index", "lease_owner"}
    assert _row(Sample, fast.pk, *different) == _row(Sample, slow.pk, *different)
    per_attempt = {"sample_id", "attempt_no", "idempotency_key", "fencing_token"}
    per_attempt |= {"started_at", "finished_at"}
    assert _row(Attempt, fast_attempt.pk, *per_attempt) == _row(
        Attempt, slow_attempt.pk, *per_attempt
    )
    per_entry = {"sample_id", "attempt_id", "received_at"}
    fast_entry = AnswerInbox.objects.get(sample_id=fast.pk).pk
    slow_entry = AnswerInbox.objects.get(sample_id=slow.pk).pk
    assert _row(AnswerInbox, fast_entry, *per_entry) == _row(AnswerInbox, slow_entry, *per_entry)
    assert (
        PendingAttemptCost.objects.filter(attempt_id__in=[fast_attempt.pk, slow_attempt.pk]).count()
        == 2
    )


@pytest.mark.parametrize("in_the_way", ["stale token", "lapsed lease", "changed since read"])
def test_nothing_is_written_when_the_sample_is_not_as_the_step_left_it(in_the_way: str) -> None:
    [(sample, attempt, token)] = _submitting()
    if in_the_way == "stale token":
        token -= 1
    elif in_the_way == "lapsed lease":
        Sample.objects.filter(pk=sample.pk).update(lease_until=Now())
    else:
        Sample.objects.filter(pk=sample.pk).update(attempts=2)
    before = _row(Sample, sample.pk)

    written, _ = _keep_at_once(sample, attempt, token)

    assert not written
    assert _row(Sample, sample.pk) == before
    assert Attempt.objects.get(pk=attempt.pk).status == AttemptStatus.STARTED
    assert not AnswerInbox.objects.filter(sample_id=sample.pk).exists()
    assert not PendingAttemptCost.objects.filter(attempt_id=attempt.pk).exists()
    # The sample is as read again, so the locked path can decide the outcome afresh.
    assert (sample.step, sample.submission_state, changed_fields(sample)) == (
        Step.SUBMIT,
        SubmissionState.SUBMITTING,
        [],
    )
