"""Review decisions as an analyst makes them (issue 29, finding 7): one decision settles a
sample, only decisions that can succeed are offered, an unreadable answer's raw body is on the
review page, reasons read in plain words, decisions in bulk, and a decided sample's page still
opens."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from evidence.models import Capture, EvidenceKind, ReviewDecision
from evidence.services import read_object
from sampling.models import Sample
from simulator import SimulatorHandle
from tests.evidence.helpers import OPENAI, collected_run, user

pytestmark = pytest.mark.django_db

QUEUE = "admin:evidence_reviewsample_changelist"
ACCEPT = 'value="accepted"'


def _page_url(sample: Sample) -> str:
    return reverse("admin:evidence_reviewsample_change", args=[sample.pk])


def _analyst() -> Client:
    client = Client()
    client.force_login(user("ana", tenant="acme", role="analyst"))
    return client


def _in_review(repeats: int = 1, **fields: Any) -> list[Sample]:
    run = collected_run(OPENAI, screenshot_policy="none", repeats=repeats)
    Sample.objects.filter(run=run).update(analysis_state="review", **fields)
    return list(Sample.objects.filter(run=run).order_by("id"))


def test_rejecting_a_sample_with_partial_evidence_settles_it_in_one_decision(
    simulator: SimulatorHandle, local_storage: Any
) -> None:
    [sample] = _in_review(evidence_state="partial", evidence_reason="CITATIONS_UNAVAILABLE")
    client = _analyst()

    client.post(
        reverse("admin:evidence_reviewsample_decide", args=[sample.pk]), {"decision": "rejected"}
    )

    sample.refresh_from_db()
    assert sample.analysis_state == "failed"
    assert f'href="{_page_url(sample)}"' not in client.get(reverse(QUEUE)).content.decode()
    assert ReviewDecision.objects.filter(sample=sample).count() == 1


def test_an_unreadable_answer_shows_its_raw_body_and_offers_only_reject(
    simulator: SimulatorHandle, local_storage: Any
) -> None:
    [sample] = _in_review(
        evidence_state="partial",
        analysis_reason="parse_failed: not a DashScope generation body (no output)",
    )
    capture = Capture.objects.filter(sample=sample).order_by("-revision").first()
    assert capture is not None
    raw = capture.evidence_objects.get(kind=EvidenceKind.RAW)
    body = read_object(key=raw.key).decode()

    page = _analyst().get(_page_url(sample)).content.decode()

    assert 'id="raw-body"' in page and escape(body[:60]) in page
    assert "The platform&#x27;s answer could not be read" in page
    assert "<code>parse_failed: not a DashScope generation body (no output)</code>" in page
    assert ACCEPT not in page and 'value="rejected"' in page


def test_a_sample_without_answer_text_is_not_offered_accept(
    simulator: SimulatorHandle, local_storage: Any
) -> None:
    [sample] = _in_review()
    Capture.objects.filter(sample=sample).update(answer_text="")

    page = _analyst().get(_page_url(sample)).content.decode()

    assert ACCEPT not in page and 'value="rejected"' in page


def test_the_queue_lists_reasons_in_plain_words(
    simulator: SimulatorHandle, local_storage: Any
) -> None:
    _in_review(evidence_state="partial", evidence_reason="CITATIONS_UNAVAILABLE")

    listing = _analyst().get(reverse(QUEUE)).content.decode()

    assert "The analysis is unsure about this answer" in listing
    assert "Part of the evidence is missing" in listing
    assert "CITATIONS_UNAVAILABLE" not in listing


def test_selected_samples_are_rejected_in_one_bulk_decision(
    simulator: SimulatorHandle, local_storage: Any
) -> None:
    samples = _in_review(repeats=2)
    client = _analyst()

    response = client.post(
        reverse(QUEUE),
        {"action": "reject_selected", "_selected_action": [s.pk for s in samples], "index": "0"},
        follow=True,
    )

    assert "2 samples rejected." in response.content.decode()
    assert set(Sample.objects.filter(pk__in=[s.pk for s in samples]).values_list(
        "analysis_state", flat=True)) == {"failed"}  # fmt: skip
    assert ReviewDecision.objects.filter(decision="rejected").count() == 2


def test_a_decided_samples_review_page_still_opens_without_a_form(
    simulator: SimulatorHandle, local_storage: Any
) -> None:
    [sample] = _in_review()
    client = _analyst()
    client.post(
        reverse("admin:evidence_reviewsample_decide", args=[sample.pk]), {"decision": "accepted"}
    )

    response = client.get(_page_url(sample))

    page = response.content.decode()
    assert response.status_code == 200
    assert 'id="review-decided"' in page and "accepted by ana" in page
    assert 'name="decision"' not in page
    outsider = Client()
    outsider.force_login(user("other", tenant="globex", role="analyst"))
    assert outsider.get(_page_url(sample)).status_code == 404
