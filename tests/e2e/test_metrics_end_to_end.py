"""After a run through a real worker process: /metrics has every family with values that
agree with the database and the worker's own log, and the worker's log lines about a sample
are JSON carrying the sample's context, with no configured secret in them."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from geo_collect.logs import messages
from sampling.models import Attempt, Sample, SubmissionState
from tests.conftest import launch_funded, make_campaign_data
from tests.dispatching import tick_until
from tests.e2e.conftest import drive_until_finished

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TOKEN = "metrics-token-for-the-test"
OPENAI_KEY = "sk-test-do-not-log-4f9c2a"
COLLECTOR_KEY = "collector-secret-77ab10"
TARGETS = [
    {"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"},
    {"platform": "collector", "device": "mobile", "region": "cn", "mode": "web_search"},
]
FAMILIES = (
    "geo_queue_wait_seconds",
    "geo_acceptance_latency_seconds",
    "geo_step_duration_seconds",
    "geo_messages_unacked",
    "geo_samples_uncertain",
    "geo_samples_parked",
    "geo_evidence_missing_ratio",
    "geo_reconciliation_differences",
    "geo_integrity_gaps",
    "geo_upstream_responses",
    "geo_retries",
    "geo_stale_writes_refused",
    "geo_leases_expired",
    "geo_runs_finished",
)
_STEP_DONE = re.compile(r"pipeline\.execute_step\[[^\]]+\] succeeded in")
_BATCH_DONE = re.compile(r"pipeline\.execute_(submit_batch|steps)\[[^\]]+\] succeeded in")


def _steps_executed(log: str) -> int:
    """Steps the worker logged: one per execute_step, one per sample of a message of several
    steps or of a submit batch."""
    steps = 0
    for message in messages(log):
        if _STEP_DONE.search(message):
            steps += 1
        elif _BATCH_DONE.search(message):
            steps += len(re.findall(r"\d+: '[^']*'", message))
    return steps


def _scrape(client: Any) -> dict[str, Any]:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content
    return {f.name: f for f in text_string_to_metric_families(response.content.decode())}


def _total(families: dict[str, Any], family: str, suffix: str, **labels: str) -> float:
    if family not in families:
        return 0.0
    return sum(
        s.value
        for s in families[family].samples
        if s.name == family + suffix and all(s.labels.get(k) == v for k, v in labels.items())
    )


def _after_the_end_event(client: Any, before: dict[str, Any]) -> dict[str, Any]:
    """The metrics once a run's end was counted: each tick relays the outbox (its end event)."""
    finished_before = _total(before, "geo_runs_finished", "_total")

    def counted() -> dict[str, Any] | None:
        after = _scrape(client)
        return after if _total(after, "geo_runs_finished", "_total") > finished_before else None

    return tick_until(counted, timeout=120, pause=0.5)


def test_metrics_and_logs_after_an_end_to_end_run(
    simulator: Any, celery_worker: Any, worker_env: dict[str, str], settings: Any, client: Any
) -> None:
    settings.GEO_METRICS_TOKEN = TOKEN
    worker_env.update(
        GEO_LOG_LEVEL="INFO", GEO_OPENAI_API_KEY=OPENAI_KEY, GEO_COLLECTOR_API_KEY=COLLECTOR_KEY
    )
    simulator.script(
        {"match": "Rate limited", "fault": "rate_limit", "times": 2, "platform": "openai"},
        {"match": "No screenshot", "fault": "screenshot_missing", "times": None},
    )
    before = _scrape(client)
    data = make_campaign_data(questions=0, targets=TARGETS, repeats=2)
    data["questions"] = ["Rate limited: which CRM?", "No screenshot: which CRM?", "哪个CRM好？"]
    run = launch_funded(data)
    worker = celery_worker()
    assert drive_until_finished(run.pk).finished
    after = _after_the_end_event(client, before)  # relayed through the outbox to the worker
    worker.stop()  # its last lines are written

    def delta(family: str, suffix: str, **labels: str) -> float:
        return _total(after, family, suffix, **labels) - _total(before, family, suffix, **labels)

    assert set(FAMILIES) <= set(after), set(FAMILIES) - set(after)
    log = worker.text()
    steps = _steps_executed(log)
    assert steps > 0
    assert delta("geo_step_duration_seconds", "_count") == steps
    assert delta("geo_queue_wait_seconds", "_count") >= steps  # every executed step was claimed
    accepted = Sample.objects.filter(run=run).exclude(accepted_at=None).count()
    assert delta("geo_acceptance_latency_seconds", "_count") == accepted > 0
    closed = Attempt.objects.filter(sample__run=run).exclude(status="started").count()
    assert delta("geo_upstream_responses", "_total") == closed
    assert delta("geo_upstream_responses", "_total", platform="openai", status="429") == 2
    assert delta("geo_retries", "_total", platform="openai", reason="rate_limited") == 2
    assert delta("geo_runs_finished", "_total") == 1
    assert _total(after, "geo_messages_unacked", "") == 0  # nothing in flight any more
    uncertain = Sample.objects.filter(submission_state=SubmissionState.UNCERTAIN).count()
    assert _total(after, "geo_samples_uncertain", "") == uncertain
    ratio = _total(after, "geo_evidence_missing_ratio", "", platform="collector")
    assert 0 < ratio <= 1  # "No screenshot" answers have partial evidence
    assert _total(after, "geo_reconciliation_differences", "", measure="count") >= 0
    # The run settled through its end event: nothing check_invariants would name after it.
    for gap in ("held_after_finish", "event_not_completed", "attempt_left_started"):
        assert _total(after, "geo_integrity_gaps", "", gap=gap) == 0, gap

    _assert_structured(log, run_id=str(run.pk))


def _assert_structured(log: str, *, run_id: str) -> None:
    assert OPENAI_KEY not in log and COLLECTOR_KEY not in log
    about_samples = [
        json.loads(line)
        for line in log.splitlines()
        if line.startswith("{") and "sample_id" in line
    ]
    assert about_samples, log[-3000:]
    keys = Counter[str]()
    for line in about_samples:
        assert line["run_id"] == run_id
        assert {"sample_id", "platform", "step", "token"} <= set(line), line
        if line["step"] == "submit":
            assert "attempt_no" in line, line
        keys.update(line)
    with_request_id = Attempt.objects.exclude(request_id="").exists()
    assert bool(keys["request_id"]) == with_request_id
