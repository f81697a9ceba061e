"""Copilot and Perplexity served by Bright Data (their only vendor, so the default), in-process on
the simulator: a run's samples of a surface are triggered together as one snapshot, the
snapshot's progress polled, each sample's record downloaded and its answer stored with its
citations, once each; the sample records the vendor task (the snapshot) and its input."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from connectors.adapters.brightdata import split_upstream_id
from connectors.registry import platform_vendor
from evidence.models import Capture
from geo_collect.settings import platform_settings
from pipeline import execution
from sampling.leases import claim_ready
from sampling.models import Sample
from simulator import SimulatorHandle
from tests.conftest import launch_funded, make_campaign_data
from tests.inprocess import drive_in_process
from tests.services import upstream_simulator

pytestmark = pytest.mark.django_db

TARGETS = [
    {"platform": "copilot_web", "device": "desktop", "region": "us", "mode": "web_search"},
    {"platform": "perplexity_web", "device": "desktop", "region": "de", "mode": "web_search"},
]


@pytest.fixture
def upstream(settings: Any) -> Iterator[SimulatorHandle]:
    with upstream_simulator(settings, seed=5) as handle:
        settings.GEO_PLATFORMS = platform_settings({"GEO_BRIGHTDATA_API_KEY": "bd-test-key-123"})
        handle.configure(profile={"citation_rate": 1.0})
        yield handle


def test_a_run_on_copilot_and_perplexity_completes_through_bright_data(
    upstream: SimulatorHandle,
) -> None:
    assert platform_vendor("copilot_web") == platform_vendor("perplexity_web") == "brightdata"
    data = make_campaign_data(questions=3, targets=TARGETS, repeats=1)
    data["screenshot_policy"] = "none"
    run = launch_funded(data)
    # As the dispatcher publishes them: each surface's due submits in one batch (one trigger),
    # then every later step one by one.
    for platform in ("copilot_web", "perplexity_web"):
        claims = claim_ready(platform=platform, limit=50, owner="test", lease_seconds=60)
        held = [(claim.sample_id, claim.token) for claim in claims]
        outcomes = execution.run_submit_batch(held=held, worker="test")
        assert len(outcomes) == 3, outcomes
    drive_in_process(run.pk)
    samples = list(Sample.objects.filter(run=run))
    assert len(samples) == 6
    assert {s.collection_state for s in samples} == {"completed"}, [
        (s.platform, s.collection_state, s.failure_reason) for s in samples
    ]
    captures = Capture.objects.filter(sample__run=run)
    assert captures.count() == 6  # one evidence per sample: triggered once, downloaded once
    for capture in captures:
        assert capture.answer_text
        assert capture.citations.exists(), capture.sample.platform

    # The vendor task each sample records: its surface's snapshot and its input in it.
    by_surface: dict[str, set[str]] = {}
    for sample in samples:
        snapshot_id, index = split_upstream_id(sample.upstream_id)
        assert snapshot_id.startswith("s_") and index in (1, 2, 3)
        by_surface.setdefault(sample.platform, set()).add(snapshot_id)
        assert list(sample.attempt_set.values_list("upstream_id", flat=True)) == [
            sample.upstream_id
        ]
    logged = {entry["upstream_id"] for entry in upstream.answers()}
    assert {s.upstream_id for s in samples} <= logged

    paths = upstream.stats()["platforms"]["brightdata"]["paths"]
    triggers = paths["POST /datasets/v3/trigger"]
    snapshots = set().union(*by_surface.values())
    assert triggers == len(snapshots) == 2  # one snapshot per surface's batch
    downloads = sum(n for p, n in paths.items() if p.startswith("GET /datasets/v3/snapshot/"))
    assert downloads == 6  # each sample's record downloaded once


def test_an_input_that_errored_in_its_snapshot_fails_alone(upstream: SimulatorHandle) -> None:
    data = make_campaign_data(questions=3, targets=TARGETS[1:], repeats=1)
    data["screenshot_policy"] = "none"
    run = launch_funded(data)
    doomed = Sample.objects.filter(run=run).select_related("question_revision").first()
    assert doomed is not None
    upstream.script({"match": doomed.question_revision.text, "fault": "task_failed",
                     "platform": "perplexity_web", "times": None})  # fmt: skip
    claims = claim_ready(platform="perplexity_web", limit=50, owner="test", lease_seconds=60)
    execution.run_submit_batch(held=[(c.sample_id, c.token) for c in claims], worker="test")
    drive_in_process(run.pk)

    states = dict(Sample.objects.filter(run=run).values_list("pk", "collection_state"))
    assert states.pop(doomed.pk) == "failed"
    assert set(states.values()) == {"completed"} and len(states) == 2
    assert upstream.stats()["platforms"]["brightdata"]["paths"]["POST /datasets/v3/trigger"] == 1


def test_a_trigger_whose_answer_is_lost_is_parked_never_sent_again(settings: Any) -> None:
    """Bright Data takes no client reference to find a snapshot by (supports_lookup False): a
    trigger sent and never answered is uncertain and parked for a person (the default policy),
    never triggered again behind the operator's back (a second, charged collection)."""
    with upstream_simulator(settings, seed=5) as handle:
        settings.GEO_PLATFORMS = platform_settings(
            {"GEO_BRIGHTDATA_API_KEY": "bd-test-key-123", "GEO_BRIGHTDATA_TIMEOUT": "1"}
        )
        handle.configure(profile={"hang_seconds": 3.0})
        handle.script({"match": "trigger", "fault": "hang", "platform": "copilot_web",
                       "times": None})  # fmt: skip
        data = make_campaign_data(questions=2, targets=TARGETS[:1], repeats=1)
        data["screenshot_policy"] = "none"
        run = launch_funded(data)
        drive_in_process(run.pk)

        samples = list(Sample.objects.filter(run=run))
        assert {(s.submission_state, s.collection_state) for s in samples} == {
            ("uncertain", "queued")
        }, [(s.submission_state, s.collection_state, s.failure_reason) for s in samples]
        assert all(s.upstream_id == "" for s in samples)
        paths = handle.stats()["platforms"]["brightdata"]["paths"]
        assert paths["POST /datasets/v3/trigger"] == 2  # once per sample, never again
