"""Plan expansion in SQL (PostgreSQL) writes exactly the samples the Python path writes
(sampling/expansion.py): same columns, same batches, same order of ids."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from sampling.dbtime import db_now
from sampling.expansion import expand_samples
from sampling.models import Campaign, QuestionRevision, Run, Sample
from sampling.services import campaign_as_spec, plan_run, save_campaign
from tests.conftest import make_campaign_data, spec_with_tenant

# Two platforms, targets of one platform not adjacent, and a batch limit that does not divide
# a platform's sample count: batches end in the middle of a repeat and of a question.
TARGETS = [
    {"platform": "collector", "device": "desktop", "region": "us", "mode": "web_search"},
    {"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"},
    {"platform": "collector", "device": "mobile", "region": "cn", "mode": "web_search"},
    {"platform": "collector", "device": "desktop", "region": "de", "mode": "web_search"},
]
LIMIT = 7

# Every column except the ones that name the run itself (id, run, batch as an id) and the
# write time; the batch is compared by its index, platform and size instead.
_SKIPPED = {"id", "run", "batch", "updated_at"}
_COLUMNS = [f.name for f in Sample._meta.concrete_fields if f.name not in _SKIPPED] + [
    "batch__index",
    "batch__platform",
    "batch__size",
]


def _campaign(priority: int) -> Campaign:
    data = make_campaign_data(questions=5, targets=TARGETS, repeats=3)
    data["priority"] = priority
    return save_campaign(spec=spec_with_tenant(data, submission_limit=LIMIT))


def _plan(campaign: Campaign, *, in_sql: bool | None) -> Run:
    """A run of the campaign expanded by one path (what plan_run does, path chosen)."""
    spec = campaign_as_spec(campaign=campaign, submission_limit=LIMIT)
    run = Run.objects.create(
        tenant=campaign.tenant,
        campaign=campaign,
        config_snapshot={},
        planned_samples=spec.sample_count,
        priority=spec.priority,
    )
    revision_ids = list(
        QuestionRevision.objects.filter(question__campaign=campaign)
        .order_by("question__position")
        .values_list("pk", flat=True)
    )
    assert expand_samples(run=run, spec=spec, revision_ids=revision_ids, in_sql=in_sql) == 60
    return run


def _rows(run: Run) -> list[tuple[Any, ...]]:
    return list(Sample.objects.filter(run=run).order_by("id").values_list(*_COLUMNS))


@pytest.mark.django_db
def test_sql_expansion_writes_the_same_samples_in_the_same_order_as_the_python_path() -> None:
    campaign = _campaign(priority=3)
    before = db_now()

    in_sql = _plan(campaign, in_sql=True)
    in_python = _plan(campaign, in_sql=False)

    after = db_now()
    rows = _rows(in_sql)
    assert len(rows) == 60
    # due_at is read from the database clock at each expansion; compare it apart.
    due = _COLUMNS.index("due_at")
    due_times = {row[due] for row in rows} | {row[due] for row in _rows(in_python)}
    shift = timedelta(minutes=3)  # priority 3: as if due three minutes earlier
    assert all(before - shift <= t <= after - shift for t in due_times)
    same_clock = [row[:due] + row[due + 1 :] for row in rows]
    assert same_clock == [row[:due] + row[due + 1 :] for row in _rows(in_python)]
    # Plan order: collector first (its three targets), repeat 0 of every question first.
    first = (
        Sample.objects.filter(run=in_sql)
        .order_by("id")
        .values_list("platform", "region", "repeat_index", "batch__index")[:4]
    )
    assert list(first) == [
        ("collector", "us", 0, 0),
        ("collector", "cn", 0, 0),
        ("collector", "de", 0, 0),
        ("collector", "us", 0, 0),
    ]


@pytest.mark.django_db
def test_every_batch_holds_its_size_and_one_platform_after_sql_expansion() -> None:
    run = plan_run(campaign=_campaign(priority=0), submission_limit=LIMIT)

    for batch in run.batches.all():
        platforms = set(batch.samples.values_list("platform", flat=True))
        assert (batch.samples.count(), platforms) == (batch.size, {batch.platform})
    assert Sample.objects.filter(run=run).count() == run.planned_samples == 60


@pytest.mark.django_db
def test_expansion_on_postgresql_is_one_insert_select() -> None:
    campaign = _campaign(priority=0)

    with CaptureQueriesContext(connection) as queries:
        _plan(campaign, in_sql=None)

    sample_writes = [q["sql"] for q in queries if 'INTO "sampling_sample"' in q["sql"]]
    assert len(sample_writes) == 1
    assert "generate_series" in sample_writes[0]
