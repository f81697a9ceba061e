"""Perplexity served by DataForSEO's LLM Responses API (GEO_PERPLEXITY_VENDOR=dataforseo), in
process on the simulator: each sample is answered in its submit call (live, synchronous, like
the direct adapter), its answer stored with its citations and searches, and the charge the
call states recorded on its attempt and booked once (reconciliation)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from billing.costs import book_pending_attempt_costs
from billing.reconciliation import reconcile
from evidence.models import Capture
from evidence.services import reparse_sample
from geo_collect.settings import platform_settings
from sampling.models import Attempt, Sample
from simulator import SimulatorHandle
from tests.conftest import launch_funded, make_campaign_data
from tests.inprocess import drive_in_process
from tests.services import upstream_simulator

pytestmark = pytest.mark.django_db

TARGETS = [{"platform": "perplexity", "device": "desktop", "region": "us", "mode": "web_search"}]


@pytest.fixture
def upstream(settings: Any) -> Iterator[SimulatorHandle]:
    with upstream_simulator(settings, seed=5) as handle:
        settings.GEO_PLATFORMS = platform_settings(
            {
                "GEO_PERPLEXITY_VENDOR": "dataforseo",
                # The platform's own key is its own API's: never sent to the vendor.
                "GEO_PERPLEXITY_API_KEY": "pplx-own-key-never-sent",
                "GEO_DATAFORSEO_API_KEY": "dfs-login:dfs-test-password",
            }
        )
        handle.configure(profile={"citation_rate": 1.0})
        yield handle


def test_a_perplexity_run_through_dataforseo_completes_with_its_cost_booked_once(
    upstream: SimulatorHandle,
) -> None:
    data = make_campaign_data(questions=2, targets=TARGETS, repeats=1)
    data["screenshot_policy"] = "none"
    run = launch_funded(data)
    drive_in_process(run.pk)

    samples = list(Sample.objects.filter(run=run))
    assert len(samples) == 2
    assert {s.collection_state for s in samples} == {"completed"}
    for capture in Capture.objects.filter(sample__run=run):
        assert capture.answer_text and capture.citations.exists()
        assert capture.upstream_cost == 1 and capture.upstream_cost_currency == "USD"
    stats = upstream.stats()["platforms"]
    assert stats["dataforseo"]["paths"] == {
        "POST /v3/ai_optimization/perplexity/llm_responses/live": 2
    }
    assert "perplexity" not in stats or not stats["perplexity"].get("requests")
    attempts = Attempt.objects.filter(sample__run=run)
    assert list(attempts.values_list("cost", "cost_currency")) == [(1, "USD")] * 2

    book_pending_attempt_costs()  # what the dispatcher's next tick does
    book_pending_attempt_costs()  # and a second tick books nothing again
    report = reconcile(run_id=run.pk)
    recorded = {r.upstream_id: r.recorded_cost for r in report.rows if r.platform == "perplexity"}
    assert recorded == {s.upstream_id: 1 for s in samples}  # once per call, $0.0007 -> 1 cent
    assert report.count("cost_unknown") == 0

    # `manage.py reparse --sample`: the stored raw re-derives the answer the live path gave.
    live = Capture.objects.get(sample=samples[0], revision=1)
    again, result = reparse_sample(sample_id=samples[0].pk)
    assert again.revision == 2 and result.collection_state == "completed"
    assert (again.answer_text, again.citations.count()) == (
        live.answer_text,
        live.citations.count(),
    )
