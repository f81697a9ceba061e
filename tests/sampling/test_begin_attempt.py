"""A submit's attempt begun in one statement (`sampling.steps.begin_attempt_at_once`): it
writes only when the claim still holds and nothing is in the way, and then exactly what the
locked path (`SampleStep.attempt_started`) writes."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.models.functions import Now

from sampling.leases import Claim, claim_sample
from sampling.models import Attempt, AttemptStatus, Run, Sample, SubmissionState
from sampling.plainsql import changed_fields
from sampling.steps import begin_attempt_at_once, fenced_step, load_for_step
from tests.conftest import launch_funded, make_campaign_data

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.postgresql("one statement on PostgreSQL; SQLite takes the locked path"),
]
COLLECTOR = [{"platform": "collector", "device": "desktop", "region": "us", "mode": "web_search"}]


def _claimed(questions: int = 1) -> tuple[Sample, Claim]:
    run = launch_funded(make_campaign_data(questions=questions, targets=COLLECTOR, repeats=1))
    sample_id = Sample.objects.filter(run=run).order_by("pk").values_list("pk", flat=True)[0]
    claim = claim_sample(sample_id=sample_id, owner="worker-a", lease_seconds=60)
    assert claim is not None
    loaded = load_for_step(sample_id)
    assert loaded is not None
    return loaded, claim


def _stored(sample: Sample) -> tuple[Any, ...]:
    return Sample.objects.values_list("submission_state", "attempts").get(pk=sample.pk)


def test_a_planned_leased_sample_begins_its_attempt_in_one_statement() -> None:
    sample, claim = _claimed()
    statements: list[str] = []

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        attempt = begin_attempt_at_once(sample, token=claim.token, model="gpt-test")

    assert attempt is not None and len(statements) == 1
    stored = Attempt.objects.get(pk=attempt.pk)
    assert (stored.attempt_no, stored.fencing_token, stored.model, stored.status) == (
        1,
        claim.token,
        "gpt-test",
        AttemptStatus.STARTED,
    )
    assert stored.idempotency_key == f"{sample.run_id}:{sample.pk}:1"
    assert attempt.started_at == stored.started_at  # the database default, read back
    assert _stored(sample) == (SubmissionState.SUBMITTING, 1)
    # The instance holds what was written: nothing is left to write.
    assert (sample.submission_state, sample.attempts, changed_fields(sample)) == (
        SubmissionState.SUBMITTING,
        1,
        [],
    )


def test_the_one_statement_writes_what_the_locked_path_writes() -> None:
    fast, fast_claim = _claimed(questions=2)
    at_once = begin_attempt_at_once(fast, token=fast_claim.token, model="m")
    locked_id = Sample.objects.filter(run_id=fast.run_id).exclude(pk=fast.pk).get().pk
    locked_claim = claim_sample(sample_id=locked_id, owner="worker-a", lease_seconds=60)
    assert at_once is not None and locked_claim is not None
    with fenced_step(sample_id=locked_id, token=locked_claim.token, operation="submit") as step:
        locked = step.attempt_started(model="m")

    def written(attempt: Attempt) -> dict[str, Any]:
        row = Attempt.objects.filter(pk=attempt.pk).values().get()
        return {k: v for k, v in row.items() if k not in ("id", "sample_id", "started_at")}

    assert written(at_once) | {"idempotency_key": "", "fencing_token": 0} == written(locked) | {
        "idempotency_key": "",
        "fencing_token": 0,
    }
    assert _stored(fast) == Sample.objects.values_list("submission_state", "attempts").get(
        pk=locked_id
    )


@pytest.mark.parametrize(
    "in_the_way",
    ["stale token", "lapsed lease", "changed since read", "run cancelled", "not planned"],
)
def test_nothing_is_written_when_something_is_in_the_way(in_the_way: str) -> None:
    sample, claim = _claimed()
    token = claim.token
    if in_the_way == "stale token":
        token -= 1
    elif in_the_way == "lapsed lease":
        Sample.objects.filter(pk=sample.pk).update(lease_until=Now())
    elif in_the_way == "changed since read":
        Sample.objects.filter(pk=sample.pk).update(attempts=1)
    elif in_the_way == "run cancelled":
        Run.objects.filter(pk=sample.run_id).update(cancelled_at=Now())
    else:
        sample.submission_state = SubmissionState.UNCERTAIN
    before = _stored(sample)

    assert begin_attempt_at_once(sample, token=token, model="m") is None

    assert not Attempt.objects.filter(sample_id=sample.pk).exists()
    assert _stored(sample) == before


def _hot_updates() -> int:
    with connection.cursor() as cursor:  # this transaction's own counts, visible at once
        cursor.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables "
            "WHERE relname = 'sampling_sample'"
        )
        updates, hot = cursor.fetchone()
    return int(hot) if updates else 0


def test_beginning_an_attempt_adds_no_index_entry() -> None:
    """It writes only columns no index holds, so with room on the page it is a HOT update:
    the new version of the row stays on its page and no index gets an entry."""
    sample, claim = _claimed()
    hot_before = _hot_updates()

    assert begin_attempt_at_once(sample, token=claim.token, model="m") is not None

    assert _hot_updates() == hot_before + 1


def test_the_sample_table_keeps_room_on_each_page_for_the_next_version() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'sampling_sample'")
        (options,) = cursor.fetchone()
    assert "fillfactor=75" in (options or [])
