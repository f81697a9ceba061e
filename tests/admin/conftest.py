"""Fixtures for the operator console tests: campaigns and runs made through the services."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from pipeline.launch import launch_run
from sampling.models import Campaign, Run, Sample
from sampling.services import save_campaign
from tests.conftest import BASE_CAMPAIGN, spec_with_tenant

TOKEN = re.compile(r'name="token" value="([^"]+)"')
# The layers of a sample that went all the way: answered, stored, analysed valid, done.
SUCCEEDED: dict[str, str] = {
    "submission_state": "accepted",
    "collection_state": "completed",
    "evidence_state": "stored",
    "analysis_state": "accepted",
    "validity": "valid",
    "queue_state": "done",
    "step": "none",
}


def make_campaign(data: dict[str, Any] | None = None) -> Campaign:
    return save_campaign(spec=spec_with_tenant(data or copy.deepcopy(BASE_CAMPAIGN), funded=True))


@pytest.fixture
def campaign(db: None) -> Campaign:
    return make_campaign()


@pytest.fixture
def run(campaign: Campaign) -> Run:
    """BASE_CAMPAIGN: 2 questions x 1 openai target x 2 repeats = 4 samples, one batch."""
    return launch_run(campaign=campaign)


@pytest.fixture
def run_with_outcomes(run: Run) -> Run:
    """One sample each: succeeded, failed, invalid; the fourth still pending."""
    ids = list(Sample.objects.filter(run=run).order_by("id").values_list("id", flat=True))
    Sample.objects.filter(id=ids[0]).update(**SUCCEEDED)
    Sample.objects.filter(id=ids[1]).update(
        collection_state="failed", queue_state="done", step="none", failure_reason="auth"
    )
    Sample.objects.filter(id=ids[2]).update(
        **{**SUCCEEDED, "validity": "invalid", "validity_reason": "login_page"}
    )
    return run


def preview_token(client: Client, campaign: Campaign) -> str:
    response = client.get(reverse("admin:sampling_campaign_preview", args=[campaign.pk]))
    assert response.status_code == 200
    match = TOKEN.search(response.content.decode())
    assert match, "the preview offers no launch form"
    return match.group(1)
