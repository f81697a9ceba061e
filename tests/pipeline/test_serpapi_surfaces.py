"""Google AI Mode and AI Overview served by SerpApi (GEO_<SURFACE>_VENDOR=serpapi), in-process on
the simulator: the run's samples are submitted as async searches, polled in the Search Archive,
their evidence fetched (a deferred overview with its page_token follow-up) and the answers
stored with their citations, once each."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from evidence.models import Capture
from geo_collect.settings import platform_settings
from sampling.models import Sample
from simulator import SimulatorHandle
from tests.conftest import launch_funded, make_campaign_data
from tests.inprocess import drive_in_process
from tests.services import upstream_simulator

pytestmark = pytest.mark.django_db

TARGETS = [
    {"platform": "google_ai_mode", "device": "desktop", "region": "us", "mode": "web_search"},
    {"platform": "google_ai_overview", "device": "mobile", "region": "de", "mode": "web_search"},
]


@pytest.fixture
def upstream(settings: Any) -> Iterator[SimulatorHandle]:
    with upstream_simulator(settings, seed=5) as handle:
        settings.GEO_PLATFORMS = platform_settings(
            {
                "GEO_GOOGLE_AI_MODE_VENDOR": "serpapi",
                "GEO_GOOGLE_AI_OVERVIEW_VENDOR": "serpapi",
                "GEO_SERPAPI_API_KEY": "serpapi-test-key-123",
            }
        )
        handle.configure(profile={"citation_rate": 1.0, "serpapi": {"deferred_overview_rate": 1.0}})
        yield handle


def test_a_run_on_both_google_surfaces_completes_through_serpapi(upstream: SimulatorHandle) -> None:
    data = make_campaign_data(questions=2, targets=TARGETS, repeats=1)
    data["screenshot_policy"] = "none"
    run = launch_funded(data)
    drive_in_process(run.pk)
    samples = list(Sample.objects.filter(run=run))
    assert len(samples) == 4
    assert {s.collection_state for s in samples} == {"completed"}, [
        (s.platform, s.collection_state) for s in samples
    ]
    captures = Capture.objects.filter(sample__run=run)
    assert captures.count() == 4  # one evidence per sample: submitted once, fetched once
    for capture in captures:
        assert capture.answer_text
        assert capture.citations.exists(), capture.sample.platform
    paths = upstream.stats()["platforms"]["serpapi"]["paths"]
    # One search per sample, one page_token follow-up per (deferred) overview; every search
    # looked up in the archive until done (a poll that finds it Processing, one that finds it
    # finished) and once more for its evidence.
    assert paths["GET /search"] == 4 + 2
    archive = {path: n for path, n in paths.items() if path.startswith("GET /searches/")}
    assert sorted(archive.values()) == [3, 3, 3, 3]
    logged = {entry["upstream_id"] for entry in upstream.answers()}
    assert {s.upstream_id for s in samples} <= logged
