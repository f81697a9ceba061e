"""`manage.py launch_run` for a campaign on the consumer surfaces Google AI Overview, Google AI
Mode and ChatGPT search, each served by DataForSEO on the simulator, through a real worker: the
run finishes, every answer and its sources are stored, each task's charge is recorded once,
and the engine's searches and the sources it read stay in the stored raw response."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from billing.reconciliation import reconcile
from evidence.models import Citation, EvidenceKind, EvidenceObject
from evidence.services import read_object
from sampling.models import Attempt, Run, Sample
from simulator.platforms.dataforseo import fan_out
from tests.conftest import ensure_tenant, fund_tenant, make_campaign_data
from tests.durability.conftest import assert_invariants
from tests.e2e.conftest import drive_until_finished

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TARGETS = [
    {"platform": "google_ai_overview", "device": "desktop", "region": "us", "mode": "web_search"},
    {"platform": "google_ai_mode", "device": "mobile", "region": "gb", "mode": "web_search",
     "language": "en"},
    {"platform": "chatgpt_web", "device": "desktop", "region": "de", "mode": "web_search"},
]  # fmt: skip
SURFACES = [t["platform"] for t in TARGETS]


def test_a_campaign_on_three_surfaces_runs_end_to_end_through_dataforseo(
    simulator: Any, celery_worker: Any, tmp_path: Path
) -> None:
    fund_tenant(ensure_tenant("acme"))
    data = make_campaign_data(questions=3, targets=TARGETS, repeats=2)
    path = tmp_path / "campaign.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    out = io.StringIO()
    call_command("launch_run", str(path), stdout=out)
    run = Run.objects.get(pk=json.loads(out.getvalue())["run_id"])
    celery_worker()

    status = drive_until_finished(run.pk)

    assert status.finished and status.outcome.value == "all_succeeded", status.as_dict()
    samples = Sample.objects.filter(run=run)
    assert Counter(samples.values_list("platform", "collection_state")) == {
        (surface, "completed"): 6 for surface in SURFACES
    }
    # One vendor host for every surface: every call went to /dataforseo/.
    calls = simulator.stats()["platforms"]["dataforseo"]["paths"]
    posted = {path for path in calls if path.endswith("/task_post")}
    assert posted == {
        "POST /v3/serp/google/organic/task_post",
        "POST /v3/serp/google/ai_mode/task_post",
        "POST /v3/ai_optimization/chat_gpt/llm_scraper/task_post",
    }
    # Each sample is one vendor task, the one the vendor created for its tag.
    for surface in SURFACES:
        created = {a["tag"]: a["upstream_id"] for a in simulator.answers(surface)}
        recorded = dict(
            Attempt.objects.filter(sample__run=run, sample__platform=surface).values_list(
                "idempotency_key", "upstream_id"
            )
        )
        assert created == recorded and len(created) == 6
    # The charge each task_post stated, once per task, none unknown.
    rows = reconcile(run_id=run.pk).rows
    assert Counter(r.platform for r in rows if r.recorded_cost == 1) == {s: 6 for s in SURFACES}
    assert not [r for r in rows if r.status == "cost_unknown"]
    # Sources cited are stored as citations; the searches ChatGPT ran, and what it read
    # without citing, stay in the raw response for later extraction.
    assert Citation.objects.filter(sample__run=run).exists()
    chatgpt = samples.filter(platform="chatgpt_web").first()
    assert chatgpt is not None
    stored = EvidenceObject.objects.get(capture__sample=chatgpt, kind=EvidenceKind.RAW)
    raw = json.loads(read_object(key=stored.key))
    [answer] = raw["tasks"][0]["result"]
    assert answer["fan_out_queries"] == fan_out(chatgpt.question_revision.text)
    assert len(answer["search_results"]) > len(answer["sources"])
    # Asked in the region's language (the target named none).
    assert raw["tasks"][0]["data"]["language_code"] == "de"
    report = io.StringIO()
    call_command("report", str(run.pk), "--format", "json", stdout=report)
    assert set(SURFACES) <= set(report.getvalue().split('"')), "each surface in the report"
    assert_invariants(run)
