"""Direct-API answers get a photographed evidence page on the evidence step; without a
browser the evidence is partial, with its reason, and the answer still counts."""

from __future__ import annotations

from typing import Any

import pytest

from evidence.models import EvidenceObject
from evidence.screenshots import chromium_binary
from sampling.models import Sample
from tests.conftest import launch_funded, make_campaign_data
from tests.inprocess import drive_in_process
from tests.services import simulator_fixture

OPENAI = [{"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"}]


upstream = simulator_fixture(seed=9)


def _run(policy: str) -> Sample:
    data = make_campaign_data(questions=1, targets=OPENAI, repeats=1)
    data["screenshot_policy"] = policy
    run = launch_funded(data)
    outcomes = drive_in_process(run.pk)
    assert outcomes[0] == "answered"
    return Sample.objects.get(run=run)


@pytest.mark.skipif(chromium_binary() is None, reason="needs Debian's chromium")
@pytest.mark.django_db
def test_a_direct_answer_is_photographed_with_a_separate_thumbnail(upstream: Any) -> None:
    sample = _run("optional")

    assert (sample.collection_state, sample.evidence_state) == ("completed", "stored")
    kinds = set(
        EvidenceObject.objects.filter(capture__sample=sample).values_list("kind", flat=True)
    )
    assert {"raw", "text", "screenshot", "thumbnail"} <= kinds
    shot = EvidenceObject.objects.get(capture__sample=sample, kind="screenshot")
    thumb = EvidenceObject.objects.get(capture__sample=sample, kind="thumbnail")
    assert shot.mime == thumb.mime == "image/png"
    assert thumb.size < shot.size


@pytest.mark.django_db
def test_without_a_browser_the_evidence_is_partial_and_the_answer_counts(
    upstream: Any, settings: Any
) -> None:
    settings.GEO_CHROMIUM_PATH = "/nonexistent/chromium"

    sample = _run("optional")

    assert (sample.collection_state, sample.evidence_state) == ("completed", "partial")
    assert sample.evidence_reason.startswith("SCREENSHOT_UNAVAILABLE")
    assert (sample.analysis_state, sample.validity) == ("accepted", "valid")
    assert not EvidenceObject.objects.filter(capture__sample=sample, kind="screenshot").exists()


@pytest.mark.django_db
def test_no_screenshot_policy_renders_nothing(upstream: Any) -> None:
    sample = _run("none")

    assert sample.evidence_state == "stored"
    assert not EvidenceObject.objects.filter(capture__sample=sample, kind="screenshot").exists()
