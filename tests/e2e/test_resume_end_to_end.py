"""Resume in real processes: a run with login pages and failures injected ends partially
succeeded; `manage.py resume_run` redoes exactly the samples that were not valid and
completed (as many as its dry run said), keeps the valid ones byte for byte, and the run ends
again with the money conserved and each sample charged at most once."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from billing.checks import verify_ledger
from billing.selectors import run_billing
from evidence.models import Capture, EvidenceObject
from pipeline.invariants import check_all
from sampling.models import Attempt, Run, Sample, SampleReopen
from tests.conftest import launch_funded, make_campaign_data
from tests.dispatching import tick_until
from tests.e2e.conftest import drive_until_finished

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TARGETS = [
    {"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"},
    {"platform": "collector", "device": "desktop", "region": "us", "mode": "web_search"},
]
QUESTIONS = [
    "Fine: which CRM is best?",
    "Login wall: which CRM is cheapest?",
    "Always broken: which CRM has the best app?",
    "Lost by provider: which CRM for startups?",
]


def _launch() -> Run:
    data = make_campaign_data(questions=0, targets=TARGETS, repeats=1)
    data.update(questions=QUESTIONS, screenshot_policy="none")
    return launch_funded(data)


def _settled(run: Run, *, timeout: float = 60.0) -> Any:
    """Relay the run-finished event until the worker's `default` queue settled the run."""

    def settled() -> Any:
        money = run_billing(run_id=run.pk)
        return money if money.held == 0 else None

    return tick_until(settled, timeout=timeout)


def _kept_bytes(sample_ids: list[int]) -> list[Any]:
    rows: list[Any] = list(Sample.objects.filter(pk__in=sample_ids).order_by("pk").values())
    rows += list(Capture.objects.filter(sample_id__in=sample_ids).order_by("pk").values())
    rows += list(
        EvidenceObject.objects.filter(capture__sample_id__in=sample_ids).order_by("pk").values()
    )
    return rows


def test_resume_redoes_the_not_valid_completed_samples_and_keeps_the_rest(
    simulator: Any, celery_worker: Any
) -> None:
    # The openai samples of "Always broken" fail all three attempts (GEO_MAX_SUBMIT_ATTEMPTS).
    simulator.script(
        {"match": "Login wall", "fault": "login_page", "times": 1, "platform": "openai"},
        {"match": "Always broken", "fault": "server_error", "times": 3, "platform": "openai"},
        {"match": "Lost by provider", "fault": "task_failed", "times": 1},
    )
    run = _launch()
    celery_worker()

    first = drive_until_finished(run.pk)
    assert first.finished and first.outcome.value == "partially_succeeded", first.as_dict()
    _settled(run)
    valid_ids = list(
        Sample.objects.filter(run=run, collection_state="completed", validity="valid").values_list(
            "pk", flat=True
        )
    )
    kept_before = _kept_bytes(valid_ids)
    attempts_before = dict(Sample.objects.filter(run=run).values_list("pk", "attempts"))

    out = StringIO()
    call_command("resume_run", str(run.pk), "--dry-run", stdout=out)
    plan = json.loads(out.getvalue())
    assert plan["kept"] == len(valid_ids)
    assert plan["redo"] == first.planned - len(valid_ids) >= 3
    assert not SampleReopen.objects.exists()

    out = StringIO()
    call_command("resume_run", str(run.pk), stdout=out)
    assert json.loads(out.getvalue()) == plan

    second = drive_until_finished(run.pk)
    assert second.finished and second.outcome.value == "all_succeeded", second.as_dict()
    money = _settled(run)

    reopened = set(SampleReopen.objects.filter(run=run).values_list("sample_id", flat=True))
    assert len(reopened) == plan["redo"]
    assert reopened.isdisjoint(valid_ids)
    for sample in Sample.objects.filter(pk__in=reopened):
        assert sample.attempts == attempts_before[sample.pk] + 1
        assert Attempt.objects.filter(sample=sample, attempt_no=sample.attempts).exists()
    assert _kept_bytes(valid_ids) == kept_before

    assert money.balanced and money.held == 0, money.as_dict()
    assert money.samples_charged == second.planned  # once each
    assert [v.message for v in check_all(run.pk)] == []
    assert verify_ledger().violations == []


def test_collector_submits_go_in_batches_and_the_providers_quote_is_recorded(
    simulator: Any, celery_worker: Any
) -> None:
    simulator.script({"match": "No capacity", "fault": "task_rejected", "times": 1})
    data = make_campaign_data(questions=0, targets=TARGETS[1:], repeats=2)
    data.update(
        questions=[f"Batch question {i}: which CRM?" for i in range(5)]
        + ["No capacity: which CRM?"],
        screenshot_policy="none",
    )
    run = launch_funded(data)
    quote = (run.quote_snapshot or {})["provider_quotes"]["collector"]
    assert quote["tasks"] == 12 and quote["total"] > 0 and quote["quote_id"]
    celery_worker()

    status = drive_until_finished(run.pk)

    assert status.finished and status.planned == 12, status.as_dict()
    batch_calls = simulator.stats()["platforms"]["collector"]["paths"]["POST /v1/batches"]
    assert batch_calls < 12  # several tasks per call
    refused = Sample.objects.get(run=run, question_revision__text__startswith="No capacity",
                                 repeat_index=0)  # fmt: skip
    assert refused.collection_state == "failed"
    assert "region_unavailable" in refused.failure_reason
    _settled(run)  # the run-finished event, relayed and handled
    assert [v.message for v in check_all(run.pk)] == []
