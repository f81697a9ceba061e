"""The outcome buckets (sampling/buckets.py) over samples in every combination of their layer
states, queue state and validity: each bucket's SQL and its Q select the same samples, the
buckets partition the samples, and the trigger-maintained counters count what they select."""

from __future__ import annotations

import itertools

import pytest
from django.db import connection

from sampling import buckets, counters
from sampling.buckets import Bucket
from sampling.models import (
    AnalysisState,
    CollectionState,
    EvidenceState,
    QueueState,
    Run,
    Sample,
    SubmissionState,
)
from tests.conftest import launch_funded, make_campaign_data

pytestmark = pytest.mark.django_db

COMBINATIONS = list(
    itertools.product(
        SubmissionState.values,
        CollectionState.values,
        EvidenceState.values,
        AnalysisState.values,
        QueueState.values,
        ["", "valid", "invalid"],
    )
)
EVERY_BUCKET = (
    *buckets.OUTCOMES,
    buckets.UNCLASSIFIED,
    buckets.TERMINAL,
    buckets.PARKED,
    buckets.UNCERTAIN,
)


@pytest.fixture
def run() -> Run:
    """One sample of a real launch, and a copy of it in every state combination."""
    data = make_campaign_data(
        questions=1,
        targets=[{"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"}],
        repeats=1,
        tenant="buckets",
    )
    run = launch_funded(data)
    template = Sample.objects.get(run=run)
    Sample.objects.bulk_create(
        Sample(
            run=run,
            batch_id=template.batch_id,
            tenant_id=template.tenant_id,
            question_revision_id=template.question_revision_id,
            platform=template.platform,
            device=template.device,
            region=template.region,
            mode=template.mode,
            repeat_index=index,
            submission_state=submission,
            collection_state=collection,
            evidence_state=evidence,
            analysis_state=analysis,
            queue_state=queue,
            validity=validity,
        )
        for index, (submission, collection, evidence, analysis, queue, validity) in enumerate(
            COMBINATIONS, start=1
        )
    )
    template.delete()
    return run


def _by_sql(run: Run, bucket: Bucket) -> set[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT s.id FROM sampling_sample s WHERE s.run_id = %s AND ({bucket.sql('s')})",
            [run.pk],
        )
        return {row[0] for row in cursor.fetchall()}


def _by_q(run: Run, bucket: Bucket) -> set[int]:
    return set(Sample.objects.filter(bucket.q(), run=run).values_list("pk", flat=True))


@pytest.mark.parametrize("bucket", EVERY_BUCKET, ids=lambda b: b.name)
def test_a_buckets_sql_and_its_q_select_the_same_samples(run: Run, bucket: Bucket) -> None:
    selected = _by_q(run, bucket)
    assert selected, f"no state combination is {bucket.name}: the comparison would prove nothing"
    assert _by_sql(run, bucket) == selected


def test_every_sample_is_in_exactly_one_bucket(run: Run) -> None:
    everyone = set(Sample.objects.filter(run=run).values_list("pk", flat=True))
    assert len(everyone) == len(COMBINATIONS)
    partition = [_by_q(run, bucket) for bucket in (*buckets.OUTCOMES, buckets.UNCLASSIFIED)]
    assert sum(len(part) for part in partition) == len(everyone)
    assert set().union(*partition) == everyone


def test_the_report_classifier_names_each_samples_bucket(run: Run) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT s.id, {buckets.case_sql('s')} FROM sampling_sample s WHERE s.run_id = %s",
            [run.pk],
        )
        named = dict(cursor.fetchall())
    for bucket in buckets.OUTCOMES:
        assert {pk for pk, name in named.items() if name == bucket.name} == _by_q(run, bucket)
    assert {pk for pk, name in named.items() if name is None} == _by_q(run, buckets.UNCLASSIFIED)


@pytest.mark.parametrize(
    ("collection", "analysis", "queue", "validity", "expected"),
    [
        ("completed", "accepted", "done", "valid", "succeeded"),
        ("completed", "accepted", "ready", "valid", "succeeded"),  # counts from its write
        ("failed", "failed", "done", "", "failed"),
        ("completed", "failed", "done", "", "failed"),
        ("completed", "failed", "done", "invalid", "invalid"),
        ("completed", "accepted", "done", "invalid", "invalid"),
        ("completed", "review", "done", "valid", "review"),
        ("completed", "review", "parked", "valid", "pending"),
        ("queued", "pending", "leased", "", "pending"),
        ("failed", "failed", "ready", "", "pending"),
        ("completed", "pending", "done", "valid", "unclassified"),
        ("queued", "pending", "done", "", "unclassified"),
    ],
)
def test_a_sample_is_classified_by_its_layers_and_queue_state(
    run: Run, collection: str, analysis: str, queue: str, validity: str, expected: str
) -> None:
    sample = Sample.objects.filter(
        run=run,
        submission_state="accepted",
        collection_state=collection,
        evidence_state="stored",
        analysis_state=analysis,
        queue_state=queue,
        validity=validity,
    ).get()
    found = [
        b.name for b in (*buckets.OUTCOMES, buckets.UNCLASSIFIED) if sample.pk in _by_q(run, b)
    ]
    assert found == [expected]


def test_the_counters_count_what_the_buckets_select(run: Run) -> None:
    counted = counters.run_counts(run_id=run.pk)
    for bucket in (*buckets.OUTCOMES[:4], buckets.TERMINAL, buckets.PARKED):
        assert counted[bucket.name] == len(_by_q(run, bucket)), bucket.name
    assert counted["sub_uncertain"] == len(_by_q(run, buckets.UNCERTAIN))


def test_the_index_of_samples_not_succeeded_holds_the_samples_not_succeeded(run: Run) -> None:
    """sample_run_unsucceeded_idx's condition (sampling/models.py, which buckets.py imports
    from, so it cannot import buckets) selects the samples outside SUCCEEDED."""
    (index,) = [i for i in Sample._meta.indexes if i.name == "sample_run_unsucceeded_idx"]
    assert index.condition is not None
    in_index = set(Sample.objects.filter(index.condition, run=run).values_list("pk", flat=True))
    not_succeeded = set(
        Sample.objects.filter(~buckets.SUCCEEDED.q(), run=run).values_list("pk", flat=True)
    )
    assert in_index == not_succeeded


def test_the_reports_partition_splits_failed_into_failed_and_cancelled(run: Run) -> None:
    """REPORTED: OUTCOMES with the cancelled samples (failure reason "cancelled ...") out of
    failed; SQL and Q agree, it partitions the samples, and the report's classifier names it."""
    failed = Sample.objects.filter(buckets.FAILED.q(), run=run, collection_state="failed")
    cancelled = set(failed.values_list("pk", flat=True)[:5])
    Sample.objects.filter(pk__in=cancelled).update(failure_reason="cancelled by operator")
    Sample.objects.filter(collection_state="failed").exclude(pk__in=cancelled).update(
        failure_reason="upstream_failed: the task was cancelled upstream"
    )

    assert _by_q(run, buckets.CANCELLED) == _by_sql(run, buckets.CANCELLED) == cancelled
    assert _by_q(run, buckets.FAILED_NOT_CANCELLED) == _by_q(run, buckets.FAILED) - cancelled
    partition = [_by_q(run, b) for b in (*buckets.REPORTED, buckets.UNCLASSIFIED)]
    assert sum(len(part) for part in partition) == len(COMBINATIONS)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT s.id, {buckets.case_sql('s', buckets.REPORTED)} FROM sampling_sample s "
            "WHERE s.run_id = %s",
            [run.pk],
        )
        named = dict(cursor.fetchall())
    for bucket in buckets.REPORTED:
        assert {pk for pk, name in named.items() if name == bucket.name} == _by_sql(run, bucket)
