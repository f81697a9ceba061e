"""`manage.py launch_run` for a campaign on the consumer surfaces Google AI Overview, Google AI
Mode and ChatGPT search, on the simulator through a real worker, with each vendor that serves
them (DataForSEO all three, SerpApi the Google ones, Bright Data AI Mode and ChatGPT): the run
finishes, every answer and its sources are stored, each DataForSEO task's charge is recorded
once, and the report shows the searches the engines ran (fan-out), the sources they cite and
those they found without citing, by category, and the source opportunities (issue 27's
first done-when)."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from billing.reconciliation import reconcile
from evidence.models import Citation, CitationRole, EvidenceKind, EvidenceObject, SearchQuery
from evidence.services import read_object
from geo_collect.settings import platform_settings
from sampling.models import Attempt, Run, Sample
from simulator.platforms.dataforseo import fan_out
from tests.conftest import ensure_tenant, fund_tenant, make_campaign_data
from tests.durability.conftest import assert_invariants
from tests.e2e.conftest import drive_until_finished
from tests.reports.conftest import WORLD

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TARGETS = [
    {"platform": "google_ai_overview", "device": "desktop", "region": "us", "mode": "web_search"},
    {"platform": "google_ai_mode", "device": "mobile", "region": "gb", "mode": "web_search",
     "language": "en"},
    {"platform": "chatgpt_web", "device": "desktop", "region": "de", "mode": "web_search"},
]  # fmt: skip
SURFACES = [t["platform"] for t in TARGETS]


GOOGLE = ("google_ai_overview", "google_ai_mode")
# Which vendor serves each surface, one campaign per choice: every vendor of every surface.
CHOICES = {
    "dataforseo": dict.fromkeys(SURFACES, "dataforseo"),
    "serpapi": dict.fromkeys(GOOGLE, "serpapi") | {"chatgpt_web": "dataforseo"},
    "brightdata": {"google_ai_overview": "serpapi", "google_ai_mode": "brightdata",
                   "chatgpt_web": "brightdata"},
}  # fmt: skip
# What a vendor's results say beyond the cited sources (docs/platforms.md, fan-out table):
# the searches the engine ran, and the sources it found without citing.
SEARCHES = {("chatgpt_web", "dataforseo")}
NO_FOUND = {("google_ai_mode", "brightdata")}
NEUTRAL = [f"www.review-site-{n}.com" for n in range(24)]
# Where each vendor's tasks are posted, by surface.
POSTED = {
    "dataforseo": {
        "google_ai_overview": "POST /v3/serp/google/organic/task_post",
        "google_ai_mode": "POST /v3/serp/google/ai_mode/task_post",
        "chatgpt_web": "POST /v3/ai_optimization/chat_gpt/llm_scraper/task_post",
    },
}


def _as_served(target: dict[str, str], vendor: str) -> dict[str, str]:
    """The target as its vendor can take it: Bright Data's scrapers take a country and no
    language, and answer as a desktop browser (a campaign asking otherwise is refused)."""
    if vendor != "brightdata":
        return target
    return {k: v for k, v in target.items() if k != "language"} | {"device": "desktop"}


@pytest.mark.parametrize("choice", list(CHOICES))
def test_a_campaign_on_three_surfaces_runs_end_to_end_through_each_vendor(
    simulator: Any,
    celery_worker: Any,
    worker_env: dict[str, str],
    settings: Any,
    tmp_path: Path,
    choice: str,
) -> None:
    vendor_of = CHOICES[choice]
    chosen = {f"GEO_{surface.upper()}_VENDOR": vendor for surface, vendor in vendor_of.items()}
    chosen["GEO_SERPAPI_API_KEY"] = "serpapi-e2e-key-123"
    settings.GEO_PLATFORMS = platform_settings(chosen)
    worker_env.update(chosen)
    targets = [_as_served(target, vendor_of[target["platform"]]) for target in TARGETS]
    # Answers about the campaign's brand and competitors, citing their domains and one of
    # many neutral ones: some of those are cited beside a competitor only (opportunities).
    simulator.configure(world=WORLD | {"neutral_domains": NEUTRAL})
    fund_tenant(ensure_tenant("acme"))
    data = make_campaign_data(questions=3, targets=targets, repeats=2)
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
    # Every DataForSEO surface posted its tasks to its own endpoint of /dataforseo/.
    calls = simulator.stats()["platforms"].get("dataforseo", {}).get("paths", {})
    posted = {path for path in calls if path.endswith("/task_post")}
    assert posted == {POSTED["dataforseo"][s] for s in SURFACES if vendor_of[s] == "dataforseo"}
    searched_at_serpapi = sum(vendor == "serpapi" for vendor in vendor_of.values())
    if searched_at_serpapi:
        calls = simulator.stats()["platforms"]["serpapi"]["paths"]
        assert calls["GET /search"] >= 6 * searched_at_serpapi
    if "brightdata" in vendor_of.values():
        calls = simulator.stats()["platforms"]["brightdata"]["paths"]
        assert calls["POST /datasets/v3/trigger"] >= 1
    # Each sample is one vendor task, the one the vendor created for it.
    for surface in SURFACES:
        created = {a.get("tag") or a["upstream_id"]: a["upstream_id"]
                   for a in simulator.answers(surface)}  # fmt: skip
        recorded = Attempt.objects.filter(sample__run=run, sample__platform=surface)
        if vendor_of[surface] == "dataforseo":
            assert created == dict(recorded.values_list("idempotency_key", "upstream_id"))
        assert set(created.values()) == set(recorded.values_list("upstream_id", flat=True))
        assert len(created) == 6
    # The charge each DataForSEO task_post stated, once per task, none unknown.
    rows = reconcile(run_id=run.pk).rows
    charged = {s: 6 for s in SURFACES if vendor_of[s] == "dataforseo"}
    assert Counter(r.platform for r in rows if r.recorded_cost == 1) == charged
    assert not [r for r in rows if r.status == "cost_unknown" and r.platform in charged]
    # Every surface's answers cite sources and list some they found without citing (the
    # vendors' own result fields); ChatGPT's searches are its fan-out queries.
    for surface in SURFACES:
        cited = Citation.objects.filter(sample__run=run, platform=surface)
        assert cited.filter(role=CitationRole.CITED).exists(), surface
        found = cited.filter(role=CitationRole.FOUND).exists()
        assert found is ((surface, vendor_of[surface]) not in NO_FOUND), surface
    chatgpt = samples.filter(platform="chatgpt_web").first()
    assert chatgpt is not None
    searched = SearchQuery.objects.filter(sample=chatgpt).order_by("position")
    fanned = fan_out(chatgpt.question_revision.text)
    if ("chatgpt_web", vendor_of["chatgpt_web"]) in SEARCHES:
        assert list(searched.values_list("query", flat=True)) == fanned
        stored = EvidenceObject.objects.get(capture__sample=chatgpt, kind=EvidenceKind.RAW)
        raw = json.loads(read_object(key=stored.key))
        # Asked in the region's language (the target named none).
        assert raw["tasks"][0]["data"]["language_code"] == "de"
    else:
        assert not searched.exists()
    out = io.StringIO()
    call_command("report", str(run.pk), "--format", "json", stdout=out)
    report = json.loads(out.getvalue())
    by_platform = {m["key"]: m for m in report["by_platform"]}
    assert set(SURFACES) <= set(by_platform), "each surface in the report"
    for surface in SURFACES:
        found = (surface, vendor_of[surface]) not in NO_FOUND
        assert (by_platform[surface]["found_not_cited"] > 0) is found, surface
        assert by_platform[surface]["top_cited_domains"], surface
        assert by_platform[surface]["citation_share_by_category"], surface
    expected = {surface for surface, vendor in vendor_of.items() if (surface, vendor) in SEARCHES}
    assert {s["platform"] for s in report["searches"]} == expected
    if expected:
        assert {s["query"] for s in report["searches"]} >= set(fanned)
    assert report["source_opportunities"], "domains cited beside a competitor, never the brand"
    assert_invariants(run)
