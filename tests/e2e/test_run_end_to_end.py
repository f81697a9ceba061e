"""A run through a real Celery worker process and the simulator, with injected failures."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from evidence.models import Capture, EvidenceObject
from sampling.models import Attempt, Run, Sample
from tests.conftest import launch_funded, make_campaign_data
from tests.durability.conftest import assert_invariants
from tests.e2e.conftest import drive_until_finished

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TARGETS = [
    {"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"},
    {"platform": "collector", "device": "mobile", "region": "cn", "mode": "web_search"},
]


# Failed samples keep evidence and analysis pending: nothing to store or analyse.
# A sample whose collection failed ends its evidence and analysis layers as failed too (with
# the reason), never "pending": no page says "analysing" for it.
EXPECTED_EVIDENCE = {
    ("openai", "stored"): 10,
    ("openai", "failed"): 2,
    ("collector", "stored"): 8,
    ("collector", "partial"): 2,
    ("collector", "failed"): 2,
}
EXPECTED_ANALYSIS = {
    ("openai", "accepted"): 10,
    ("openai", "failed"): 2,
    ("collector", "accepted"): 10,
    ("collector", "failed"): 2,
}


def _launch(questions: list[str]) -> Run:
    data = make_campaign_data(questions=0, targets=TARGETS, repeats=2)
    data["questions"] = questions
    return launch_funded(data)


def _counts(run: Run, field: str) -> Counter[tuple[str, str]]:
    return Counter(Sample.objects.filter(run=run).values_list("platform", field))


def _samples(run: Run, question_prefix: str, platform: str) -> Any:
    return Sample.objects.filter(
        run=run, platform=platform, question_revision__text__startswith=question_prefix
    )


def test_run_finishes_with_every_planned_sample_accounted_for(
    simulator: Any, celery_worker: Any
) -> None:
    simulator.script(
        {"match": "Rate limited once", "fault": "rate_limit", "times": 2, "platform": "openai"},
        {"match": "Always broken", "fault": "server_error", "times": None, "platform": "openai"},
        {"match": "Truncated once", "fault": "truncate", "times": 1, "platform": "openai"},
        {
            "match": "Lost by provider",
            "fault": "task_failed",
            "times": None,
            "platform": "collector",
        },
        {
            "match": "No screenshot",
            "fault": "screenshot_missing",
            "times": None,
            "platform": "collector",
        },
    )
    run = _launch(
        [
            "Rate limited once: which CRM is best?",
            "Always broken: which CRM is cheapest?",
            "Truncated once: which CRM has the best app?",
            "Lost by provider: which CRM for startups?",
            "No screenshot: which CRM integrates with mail?",
            "哪个CRM最适合小团队？",
        ]
    )
    celery_worker()

    status = drive_until_finished(run.pk)

    assert status.finished, status.as_dict()
    assert status.planned == 6 * 2 * 2 == Sample.objects.filter(run=run).count()
    assert status.succeeded + status.failed + status.invalid + status.review == status.planned
    assert status.outcome.value == "partially_succeeded"

    # Exact counts per platform: 6 questions x 2 repeats each. OpenAI: "Always broken" fails
    # (2), the rest complete (10). Collector: "Lost by provider" fails (2), the rest complete,
    # "No screenshot" with partial evidence (2).
    assert _counts(run, "collection_state") == {
        ("openai", "completed"): 10,
        ("openai", "failed"): 2,
        ("collector", "completed"): 10,
        ("collector", "failed"): 2,
    }
    assert _counts(run, "evidence_state") == EXPECTED_EVIDENCE
    assert _counts(run, "analysis_state") == EXPECTED_ANALYSIS

    # Rate limited twice, then answered: more than one attempt, one answer.
    attempts = Attempt.objects.filter(sample__in=_samples(run, "Rate limited", "openai"))
    assert attempts.filter(error_class="rate_limited").count() == 2
    assert attempts.filter(status="accepted").count() == 2

    # A platform that always fails: failed after the bounded retries, never "completed".
    broken = _samples(run, "Always broken", "openai")
    assert {s.collection_state for s in broken} == {"failed"}
    assert all(s.attempts == 3 and "transient" in s.failure_reason for s in broken)
    # What the upstream said each time is kept as evidence: one failed capture per attempt.
    error_captures = Capture.objects.filter(sample__in=broken)
    assert error_captures.count() == 2 * 3
    assert {c.collection_state for c in error_captures} == {"failed"}
    assert EvidenceObject.objects.filter(capture__in=error_captures, kind="raw").count() == 6

    # A truncated stream is never a short answer: the raw is kept and the question re-asked.
    truncated_capture = Capture.objects.get(
        sample__in=_samples(run, "Truncated", "openai"), collection_state="truncated"
    )
    assert truncated_capture.evidence_objects.filter(kind="raw").exists()
    assert {s.collection_state for s in _samples(run, "Truncated", "openai")} == {"completed"}

    assert {s.collection_state for s in _samples(run, "Lost by provider", "collector")} == {
        "failed"
    }

    # Answer kept, screenshot missing: completed with partial evidence, and it still counts.
    for sample in _samples(run, "No screenshot", "collector"):
        assert (sample.collection_state, sample.evidence_state) == ("completed", "partial")
        assert sample.evidence_reason == "SCREENSHOT_UNAVAILABLE"
        assert sample.analysis_state == "accepted"

    # Provider answers come with a screenshot object and a cost.
    ok_collector = _samples(run, "哪个", "collector")
    assert (
        EvidenceObject.objects.filter(capture__sample__in=ok_collector, kind="screenshot").count()
        == 2
    )
    assert all(c.upstream_cost for c in Capture.objects.filter(sample__in=ok_collector))

    # Nothing is left leased or ready; every sample was analysed or failed exactly once.
    assert not Sample.objects.filter(run=run).exclude(queue_state="done").exists()
    run.refresh_from_db()
    assert run.finished_at is not None
    # The whole-system invariants and the ledger, as the durability suite checks them.
    assert_invariants(run)
