"""The plain statements of a step's reads and writes (sampling/plainsql.py) give the rows the
ORM would: same columns, same defaults, same conversions."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.models import F
from django.db.models.functions import Now
from django.forms.models import model_to_dict

from billing.models import PendingCapture
from sampling import plainsql
from sampling.models import Attempt, QuestionRevision, Run, Sample
from sampling.plainsql import (
    changed_fields,
    columns,
    converted,
    cursor,
    from_row,
    insert_rows,
    track,
    update_changed,
    update_row,
)
from tests.conftest import launch_funded, make_campaign_data

pytestmark = pytest.mark.django_db
COLLECTOR = [{"platform": "collector", "device": "desktop", "region": "us", "mode": "web_search"}]


def _sample() -> Sample:
    run = launch_funded(make_campaign_data(questions=1, targets=COLLECTOR, repeats=1))
    return Sample.objects.filter(run=run).first()  # type: ignore[return-value]


def _attempt(sample: Sample, attempt_no: int) -> Attempt:
    return Attempt(
        sample=sample,
        attempt_no=attempt_no,
        idempotency_key=f"{sample.run_id}:{sample.pk}:{attempt_no}",
        fencing_token=7,
        model="m",
    )


def _row(obj: Any) -> dict[str, Any]:
    return {f.attname: getattr(obj, f.attname) for f in type(obj)._meta.concrete_fields}


def test_inserted_rows_match_what_the_orm_writes_and_reads_back() -> None:
    sample = _sample()
    by_orm = _attempt(sample, 1)
    by_orm.save()
    plain = _attempt(sample, 2)

    insert_rows([plain])

    assert plain.pk is not None and plain._state.adding is False
    # The database default came back, as the ORM reads it back.
    assert plain.started_at is not None and by_orm.started_at is not None
    stored = {a.attempt_no: _row(a) for a in Attempt.objects.filter(sample=sample)}
    assert stored[2] == _row(plain)
    ignored = {"id", "attempt_no", "idempotency_key", "started_at"}
    assert {k: v for k, v in stored[2].items() if k not in ignored} == {
        k: v for k, v in stored[1].items() if k not in ignored
    }


def test_many_rows_go_in_one_statement_with_their_keys() -> None:
    sample = _sample()
    attempts = [_attempt(sample, n) for n in (1, 2, 3)]

    insert_rows(attempts)

    stored = dict(Attempt.objects.filter(sample=sample).values_list("attempt_no", "id"))
    assert stored == {a.attempt_no: a.pk for a in attempts}


@pytest.mark.postgresql("arrays of values are PostgreSQL's")
def test_many_rows_go_as_arrays_so_the_text_is_the_same_whatever_their_number() -> None:
    sample = _sample()
    sent: list[str] = []

    def keep(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        sent.append(sql)
        return execute(sql, params, many, context)

    two, three = [_attempt(sample, n) for n in (1, 2)], [_attempt(sample, n) for n in (3, 4, 5)]
    with connection.execute_wrapper(keep):
        insert_rows(two)
        insert_rows(three)

    assert len(sent) == 2 and sent[0] == sent[1] and "UNNEST" in sent[0]
    stored = {a.attempt_no: a for a in Attempt.objects.filter(sample=sample)}
    assert {n: a.pk for n, a in stored.items()} == {a.attempt_no: a.pk for a in two + three}
    assert all(_row(stored[a.attempt_no]) == _row(a) for a in two + three)


@pytest.mark.postgresql("prepared statements are PostgreSQL's")
def test_a_step_statement_is_prepared_on_its_connection() -> None:
    with cursor() as cur:
        cur.execute("SELECT %s::int + 41", [1])
        assert cur.fetchone() == (42,)

    with connection.cursor() as cur:
        cur.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cur.fetchall()]
    assert "SELECT $1::int + 41" in prepared


@pytest.mark.postgresql("server-bound statements are PostgreSQL's")
def test_a_long_statement_has_its_placeholders_converted_once_per_text() -> None:
    values = list(range(60))  # past psycopg's own limits: 4 KiB and 50 parameters
    sql = "SELECT " + ", ".join(["%s::int"] * len(values)) + " -- " + "x" * 5000
    before = plainsql._placeholders.cache_info()

    for _ in range(3):
        with cursor() as cur:
            cur.execute(sql, values)
            assert cur.fetchone() == tuple(values)

    after = plainsql._placeholders.cache_info()
    assert (after.misses - before.misses, after.hits - before.hits) == (1, 2)


def test_ignore_conflicts_skips_a_row_already_there() -> None:
    sample = _sample()
    first = PendingCapture(run_id=sample.run_id, sample_id=sample.pk)
    again = PendingCapture(run_id=sample.run_id, sample_id=sample.pk)

    assert insert_rows([first], ignore_conflicts=True) == [first]
    assert insert_rows([again], ignore_conflicts=True) == []

    assert list(
        PendingCapture.objects.filter(sample_id=sample.pk).values_list("pk", flat=True)
    ) == [first.pk]
    assert again.pk is None


def test_update_writes_named_fields_and_expressions_only_where_the_condition_holds() -> None:
    sample = _sample()
    before = Sample.objects.get(pk=sample.pk)
    sample.failure_reason = "written"
    sample.due_at = Now() + timedelta(hours=1)
    sample.step = "not written: not named"

    refused = update_row(sample, ["failure_reason"], where={"fencing_token": -1})
    written = update_row(
        sample, ["failure_reason", "due_at"], where={"fencing_token": before.fencing_token}
    )

    assert (refused, written) == (0, 1)
    after = Sample.objects.get(pk=sample.pk)
    assert after.failure_reason == "written"
    assert after.step == before.step
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        now = cursor.fetchone()[0]
    assert timedelta(minutes=59) < after.due_at - now <= timedelta(hours=1)


def test_now_is_the_database_time_of_the_update() -> None:
    sample = _sample()
    sample.accepted_at = Now()
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        before = cursor.fetchone()[0]

    written = update_row(
        sample,
        ["accepted_at"],
        values={"updated_at": Now()},
        where={"fencing_token": sample.fencing_token},
    )

    assert written == 1
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        after_update = cursor.fetchone()[0]
    after = Sample.objects.get(pk=sample.pk)
    assert before <= after.accepted_at <= after_update
    assert after.updated_at == after.accepted_at  # one statement, one statement time


def test_compiled_expressions_are_kept_apart_and_each_writes_its_own_value() -> None:
    sample = _sample()
    Sample.objects.filter(pk=sample.pk).update(attempts=3, claims=5, priority=0)

    update_row(sample, [], values={"priority": F("attempts"), "accepted_at": Now()})
    # Kept apart from F("attempts") compiled above: a mixed-up cache would write 3 here.
    update_row(sample, [], values={"attempts": F("claims"), "accepted_at": Now()})
    update_row(sample, [], values={"claims": F("attempts") + 1})  # with a parameter

    after = Sample.objects.get(pk=sample.pk)
    assert (after.priority, after.attempts, after.claims) == (3, 5, 6)
    assert after.accepted_at is not None


def test_a_row_read_plainly_equals_the_orm_instance() -> None:
    sample = _sample()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns(Sample, 's')}, {columns(QuestionRevision, 'q')} "
            "FROM sampling_sample s JOIN sampling_questionrevision q "
            "ON q.id = s.question_revision_id WHERE s.id = %s",
            [sample.pk],
        )
        row = cursor.fetchone()

    plain = from_row(Sample, row)
    question = from_row(QuestionRevision, row[len(Sample._meta.concrete_fields) :])

    assert _row(plain) == _row(Sample.objects.get(pk=sample.pk))
    assert model_to_dict(question) == model_to_dict(sample.question_revision)
    assert plain._state.adding is False


def test_a_few_columns_of_a_join_read_plainly_equal_the_orm_values() -> None:
    sample = _sample()
    insert_rows([_attempt(sample, 1)])
    fields = [(Sample, "due_at"), (Attempt, "started_at"), (Run, "config_snapshot")]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT s.due_at, a.started_at, r.config_snapshot FROM sampling_sample s "
            "JOIN sampling_attempt a ON a.sample_id = s.id JOIN sampling_run r ON r.id = s.run_id "
            "WHERE s.id = %s",
            [sample.pk],
        )
        row = cursor.fetchone()

    due_at, started_at, snapshot = converted(row, fields)

    assert (due_at, started_at, snapshot) == (
        Sample.objects.get(pk=sample.pk).due_at,
        Attempt.objects.get(sample=sample).started_at,
        Run.objects.get(pk=sample.run_id).config_snapshot,
    )
    assert due_at.tzinfo is not None and isinstance(snapshot, dict)


def test_changed_fields_are_the_fields_assigned_a_different_value_since_tracked() -> None:
    sample = _sample()
    track(sample)
    sample.failure_reason = "new"
    sample.platform = sample.platform  # the same value
    sample.due_at = Now()  # an expression always differs

    assert set(changed_fields(sample)) == {"due_at", "failure_reason"}


def test_update_changed_writes_what_changed_and_reads_expressions_back() -> None:
    sample = _sample()
    track(sample)
    sample.failure_reason = "written"
    sample.due_at = Now()

    assert update_changed(sample) == 1

    stored = Sample.objects.get(pk=sample.pk)
    assert (stored.failure_reason, stored.due_at) == ("written", sample.due_at)
    assert changed_fields(sample) == []  # the row as written is what is tracked now
