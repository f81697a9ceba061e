"""The analyst's review queue in the console."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from evidence.models import ReviewDecision
from sampling.models import Sample
from simulator import SimulatorHandle
from tests.evidence.helpers import OPENAI, analyse, collected_run, record_result, result, user

pytestmark = pytest.mark.django_db

QUEUE = "admin:evidence_reviewsample_changelist"


def _queued_for_review(answer: str) -> Sample:
    run = collected_run(OPENAI)
    sample = Sample.objects.get(run=run)
    record_result(sample, result(answer, [("https://acme.com/pricing?utm_source=x", "Acme")]))
    sample = analyse(sample)
    Sample.objects.filter(pk=sample.pk).update(analysis_state="review")
    return Sample.objects.get(pk=sample.pk)


def _client(account: Any) -> Client:
    client = Client()
    client.force_login(account)
    return client


def test_analysis_in_review_is_accepted_through_the_state_machine(
    simulator: SimulatorHandle, local_storage: Any
) -> None:
    sample = _queued_for_review("**Acme** beats Globex on price. Acme has docs.")
    client = _client(user("ana", tenant="acme", role="analyst"))

    listing = client.get(reverse(QUEUE))
    sample_page = reverse("admin:evidence_reviewsample_change", args=[sample.pk])
    assert listing.status_code == 200
    assert f'href="{sample_page}"' in listing.content.decode()

    detail = client.get(sample_page)
    page = detail.content.decode()
    assert detail.status_code == 200
    assert '<mark class="geo-brand">Acme</mark>' in page
    assert '<mark class="geo-competitor">Globex</mark>' in page
    assert "<strong><mark" in page  # Markdown rendered, then highlighted
    assert "https://acme.com/pricing" in page  # citations
    assert "The analysis is unsure about this answer" in page

    decide = reverse("admin:evidence_reviewsample_decide", args=[sample.pk])
    response = client.post(decide, {"decision": "accepted", "note": "checked"})
    assert response.status_code == 302
    sample.refresh_from_db()
    assert sample.analysis_state == "accepted"
    decision = ReviewDecision.objects.get(sample=sample)
    assert (decision.analysis_state_before, decision.analysis_state_after) == ("review", "accepted")
    assert f'href="{sample_page}"' not in client.get(reverse(QUEUE)).content.decode()


def test_reject_fails_the_analysis(simulator: SimulatorHandle, local_storage: Any) -> None:
    sample = _queued_for_review("Acme.")
    client = _client(user("ana", tenant="acme", role="analyst"))
    client.post(
        reverse("admin:evidence_reviewsample_decide", args=[sample.pk]), {"decision": "rejected"}
    )
    sample.refresh_from_db()
    assert sample.analysis_state == "failed"


def test_partial_evidence_shows_its_reason_and_can_only_be_acknowledged(
    simulator: SimulatorHandle, local_storage: Any
) -> None:
    run = collected_run(OPENAI, screenshot_policy="none")
    sample = Sample.objects.get(run=run)
    Sample.objects.filter(pk=sample.pk).update(
        evidence_state="partial", evidence_reason="SCREENSHOT_UNAVAILABLE"
    )
    client = _client(user("ana", tenant="acme", role="analyst"))
    sample_page = reverse("admin:evidence_reviewsample_change", args=[sample.pk])
    page = client.get(sample_page)
    assert "Part of the evidence is missing" in page.content.decode()
    assert "<code>SCREENSHOT_UNAVAILABLE</code>" in page.content.decode()  # folded detail
    assert "No screenshot stored." in page.content.decode()

    decide = reverse("admin:evidence_reviewsample_decide", args=[sample.pk])
    client.post(decide, {"decision": "accepted"})  # not in review: the machine refuses
    sample.refresh_from_db()
    assert sample.analysis_state == "accepted" and not ReviewDecision.objects.exists()

    client.post(decide, {"decision": "acknowledged"})
    assert ReviewDecision.objects.get(sample=sample).decision == "acknowledged"
    assert f'href="{sample_page}"' not in client.get(reverse(QUEUE)).content.decode()


def test_other_tenants_see_nothing(simulator: SimulatorHandle, local_storage: Any) -> None:
    sample = _queued_for_review("Acme.")
    outsider = _client(user("other", tenant="globex", role="analyst"))
    assert f">{sample.pk}<" not in outsider.get(reverse(QUEUE)).content.decode()
    detail = outsider.get(reverse("admin:evidence_reviewsample_change", args=[sample.pk]))
    assert detail.status_code == 404
    decide = reverse("admin:evidence_reviewsample_decide", args=[sample.pk])
    assert outsider.post(decide, {"decision": "accepted"}).status_code == 404
    sample.refresh_from_db()
    assert sample.analysis_state == "review"
    finance = _client(user("fin", tenant="acme", role="finance"))
    assert finance.get(reverse(QUEUE)).status_code in (302, 403)
