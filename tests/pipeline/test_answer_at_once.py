"""A direct answer kept and archived in one statement each (pipeline/submission.py
`_keep_at_once`, `_answered_at_once`; `SampleStep.write_at_once`): the rows they write are
those the locked path writes, and a step that cannot take that path takes the locked one."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from analysis.models import AnalysisResult, Mention
from billing.models import PendingAttemptCost, PendingCapture
from connectors.base import Citation, SubmitOutcome
from evidence.models import Capture, EvidenceObject, SearchQuery
from evidence.models import Citation as CitationRow
from pipeline import execution, submission
from sampling.models import AnswerInbox, Attempt, Run, Sample, Step
from tests.conftest import launch_funded, make_campaign_data
from tests.pipeline.test_execution import _claim, _result, upstream  # noqa: F401

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.postgresql("one statement on PostgreSQL; SQLite takes the locked path"),
]
OPENAI = [{"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"}]
CITED = [
    Citation(
        id="1",
        url="https://acme.example/crm?utm=x",
        normalized_url="https://acme.example/crm",
        title="Acme CRM",
        start=0,
        end=4,
    )
]


def _samples(questions: int) -> list[Sample]:
    data = make_campaign_data(questions=questions, targets=OPENAI, repeats=1)
    data["screenshot_policy"] = "none"
    return list(Sample.objects.filter(run=launch_funded(data)).order_by("pk"))


def _answered(sample: Sample) -> tuple[str, list[str]]:
    """Run the sample's submit as the worker does; what happened and the statements sent."""
    claim = _claim(sample)
    statements: list[str] = []

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        statements.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        outcome = execution.run_step(sample_id=sample.pk, token=claim.token, worker="test")
    return outcome, [sql for sql in statements if "SAVEPOINT" not in sql]


def _written(sample: Sample) -> dict[str, Any]:
    """What a direct answer leaves in every table it writes, without keys and times."""
    leave_out = {
        "id",
        "sample_id",
        "capture_id",
        "created_at",
        "captured_at",
        "question_revision_id",
    }
    leave_out |= {"run_id", "revision_id", "received_at", "attempt_id", "entry_id"}

    def rows(model: Any, **where: Any) -> list[dict[str, Any]]:
        found = model.objects.filter(**where).order_by("pk").values()
        return [{k: v for k, v in row.items() if k not in leave_out} for row in found]

    stored = (
        Sample.objects.filter(pk=sample.pk)
        .values(
            "step",
            "queue_state",
            "submission_state",
            "collection_state",
            "evidence_state",
            "analysis_state",
            "validity",
            "upstream_id",
            "claims",
            "attempts",
        )
        .get()
    )
    captures = Capture.objects.filter(sample=sample)
    return {
        "sample": stored,
        "attempts": [
            {
                k: v
                for k, v in row.items()
                if k not in {"idempotency_key", "fencing_token", "started_at", "finished_at"}
            }
            for row in rows(Attempt, sample=sample)
        ],
        "captures": [
            {k: v for k, v in row.items() if k not in {"fencing_token", "answer_text"}}
            for row in rows(Capture, sample=sample)
        ],
        "objects": [
            {k: v for k, v in row.items() if k not in {"key"}}
            for row in rows(EvidenceObject, capture__in=captures)
        ],
        "citations": rows(CitationRow, sample=sample),
        "searches": rows(SearchQuery, sample=sample),
        "analysis": rows(AnalysisResult, sample=sample),
        "mentions": rows(Mention, sample=sample),
        "charge": PendingCapture.objects.filter(sample_id=sample.pk).count(),
        "cost": PendingAttemptCost.objects.filter(attempt__sample=sample).count(),
        "inbox": AnswerInbox.objects.filter(sample=sample).count(),
    }


def _cited(count: int) -> list[Citation]:
    return [
        Citation(
            id=str(n),
            url=f"https://acme{n}.example/crm?utm=x",
            normalized_url=f"https://acme{n}.example/crm",
            title=f"Acme {n}",
            start=0,
            end=4,
        )
        for n in range(count)
    ]


@pytest.mark.parametrize("cited", [1, 3])
def test_an_answer_kept_and_archived_at_once_is_stored_as_the_locked_path_stores_it(
    upstream: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    cited: int,
) -> None:
    answer = _result(citations=CITED + _cited(cited - 1), search_queries=["best crm", "acme"])
    upstream(submit=SubmitOutcome(upstream_id="resp-1", result=answer))
    fast, slow = _samples(questions=2)
    assert _answered(fast)[0] == "answered"
    monkeypatch.setattr(submission, "unlocked_step", lambda ctx, sample: None)
    assert _answered(slow)[0] == "answered"

    at_once, locked = _written(fast), _written(slow)
    assert at_once == locked
    assert at_once["sample"]["step"] == Step.NONE and at_once["inbox"] == 0
    assert len(at_once["citations"]) == cited and len(at_once["searches"]) == 2
    assert at_once["mentions"] and at_once["charge"] == 1


def test_the_archive_is_the_same_statement_whatever_the_number_of_citations(
    upstream: Any,  # noqa: F811
) -> None:
    """Its text is prepared once per connection, not once per count of citations."""
    first, few, many = _samples(questions=3)
    archives = []
    for sample, cited in ((first, 1), (few, 2), (many, 5)):
        answer = _result(citations=_cited(cited), search_queries=["crm"] * cited)
        upstream(submit=SubmitOutcome(upstream_id=f"resp-{cited}", result=answer))
        outcome, statements = _answered(sample)
        assert outcome == "answered"
        archives += [sql for sql in statements if sql.startswith("WITH w0") and "UNNEST" in sql]

    assert len(archives) == 3 and archives[1] == archives[2]  # EvidenceObject rows: always many
    assert CitationRow.objects.filter(sample=many).count() == 5


def test_a_run_whose_last_answer_is_archived_at_once_finishes(
    upstream: Any,  # noqa: F811
    django_capture_on_commit_callbacks: Any,
) -> None:
    upstream(submit=SubmitOutcome(upstream_id="resp-1", result=_result()))
    [only] = _samples(questions=1)

    with django_capture_on_commit_callbacks(execute=True):  # after the write's commit
        assert _answered(only)[0] == "answered"

    assert Run.objects.filter(pk=only.run_id).exclude(finished_at=None).exists()


def test_a_direct_answer_is_kept_and_archived_without_a_lock_in_one_write_each(
    upstream: Any,  # noqa: F811
) -> None:
    upstream(submit=SubmitOutcome(upstream_id="resp-1", result=_result()))
    first, second = _samples(questions=2)
    _answered(first)  # the run's first answer also sets up its analysis revision

    outcome, statements = _answered(second)

    assert outcome == "answered"
    writes = [sql for sql in statements if sql.startswith("WITH w0 AS (UPDATE")]
    assert len(writes) == 3  # the attempt begun, the answer kept, then archived
    assert not any("FOR UPDATE" in sql for sql in statements)
    renewal = "UPDATE sampling_sample SET lease_until"  # a claim of a minute, renewed first
    others = [sql for sql in statements if sql not in writes and not sql.startswith(renewal)]
    assert not {"INSERT", "UPDATE", "DELETE"} & {sql.split()[0].upper() for sql in others}
