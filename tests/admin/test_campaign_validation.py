"""A campaign is held to the plan preview's rules when it is saved (console form and API), in
plain words beside the row at fault; questions are kept and asked exactly as typed, and only
compared normalised (issue 29, finding 6)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from pipeline.launch import launch_run
from pipeline.step_context import request_for
from sampling.models import Brand, Campaign, Question, QuestionRevision
from sampling.snapshots import RunConfig
from tenancy.models import Tenant
from tests.admin.test_campaign_admin import _campaign_post
from tests.conftest import fund_tenant

pytestmark = pytest.mark.django_db

QUESTION = {"position": 0, "text": "Which CRM is best for a small team?", "is_active": "on"}


@pytest.fixture
def tenant() -> Tenant:
    return Tenant.objects.create(slug="acme", name="Acme Corp")


@pytest.fixture
def brand(tenant: Tenant) -> Brand:
    return Brand.objects.create(tenant=tenant, name="Acme", aliases=["ACME"], domains=["acme.com"])


def _post(client: Client, data: dict[str, Any]) -> str:
    response = client.post(reverse("admin:sampling_campaign_add"), data)
    assert response.status_code == 200, "the form was saved"
    assert not Campaign.objects.exists()
    return response.content.decode()


@pytest.mark.parametrize("repeats", [0, 500])
def test_repeats_out_of_range_are_refused_at_save_in_plain_words(
    admin_client: Client, tenant: Tenant, brand: Brand, repeats: int
) -> None:
    data = {**_campaign_post(tenant, brand, [QUESTION]), "repeats": repeats}

    page = _post(admin_client, data)

    assert f"{repeats} is not possible: each question is asked 1 to 100 times per target." in page


def test_a_campaign_without_questions_is_refused_at_save(
    admin_client: Client, tenant: Tenant, brand: Brand
) -> None:
    page = _post(admin_client, _campaign_post(tenant, brand, []))

    assert "A campaign needs at least one question." in page


def test_a_campaign_without_targets_is_refused_at_save(
    admin_client: Client, tenant: Tenant, brand: Brand
) -> None:
    data = _campaign_post(tenant, brand, [QUESTION])
    data["targets-TOTAL_FORMS"] = 0

    page = _post(admin_client, data)

    assert "A campaign needs at least one platform target." in page


def test_a_region_the_platform_does_not_serve_is_said_once_beside_its_row(
    admin_client: Client, tenant: Tenant, brand: Brand
) -> None:
    gemini_us = {"platform": "gemini", "device": "desktop", "region": "us", "mode": "web_search"}
    data = _campaign_post(tenant, brand, [QUESTION], targets=[gemini_us])

    page = _post(admin_client, data)

    # The row's own form and the whole-campaign check both see it; the person reads it once.
    assert page.count("does not support region &#x27;us&#x27;") == 1
    assert "Target gemini / desktop / us / web_search" in page


def test_a_target_the_platform_cannot_serve_is_refused_at_save(
    admin_client: Client, tenant: Tenant, brand: Brand
) -> None:
    data = {**_campaign_post(tenant, brand, [QUESTION]), "screenshot_policy": "required"}

    page = _post(admin_client, data)

    assert "Platform &#x27;openai&#x27; cannot take screenshots" in page


@pytest.mark.parametrize(
    "again",
    [
        "  Which   CRM is best for a small   team?",  # spacing
        "which crm is best for a small team?",  # letter case
        "Which CRM is best for a small team？",  # full-width question mark
    ],
)
def test_the_same_question_twice_is_refused_at_save(
    admin_client: Client, tenant: Tenant, brand: Brand, again: str
) -> None:
    questions = [QUESTION, {"position": 1, "text": again, "is_active": "on"}]

    page = _post(admin_client, _campaign_post(tenant, brand, questions))

    assert "The same question as &#x27;Which CRM is best for a small team?&#x27;" in page
    assert not QuestionRevision.objects.exists()


def test_a_question_is_stored_snapshotted_and_asked_exactly_as_typed(
    admin_client: Client, tenant: Tenant, brand: Brand
) -> None:
    typed = "哪个CRM  最适合小团队？"
    questions = [{"position": 0, "text": typed, "is_active": "on"}]
    response = admin_client.post(
        reverse("admin:sampling_campaign_add"), _campaign_post(tenant, brand, questions)
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    campaign = Campaign.objects.get()
    fund_tenant(tenant)

    run = launch_run(campaign=campaign)

    assert QuestionRevision.objects.get().text == typed
    assert [q.text for q in RunConfig.of(run).questions] == [typed]
    sample = run.samples.select_related("run", "question_revision").first()
    assert sample is not None and request_for(sample, "key").question == typed


def test_the_question_list_refuses_a_duplicate_of_another_question(
    admin_client: Client, tenant: Tenant, brand: Brand
) -> None:
    response = admin_client.post(
        reverse("admin:sampling_campaign_add"), _campaign_post(tenant, brand, [QUESTION])
    )
    assert response.status_code == 302
    campaign = Campaign.objects.get()

    response = admin_client.post(
        reverse("admin:sampling_question_add"),
        {
            "campaign": campaign.pk,
            "position": 3,
            "text": "WHICH CRM is best for a small team ?",
            "is_active": "on",
        },
    )

    assert response.status_code == 200
    assert "The same question as" in response.content.decode()
    assert Question.objects.count() == 1


def test_the_brand_list_shows_only_the_campaigns_tenant(
    admin_client: Client, tenant: Tenant, brand: Brand
) -> None:
    other = Tenant.objects.create(slug="globex", name="Globex")
    Brand.objects.create(tenant=other, name="Globex Brand")
    response = admin_client.post(
        reverse("admin:sampling_campaign_add"), _campaign_post(tenant, brand, [QUESTION])
    )
    assert response.status_code == 302
    campaign = Campaign.objects.get()

    change = admin_client.get(reverse("admin:sampling_campaign_change", args=[campaign.pk]))
    add = admin_client.get(reverse("admin:sampling_campaign_add") + f"?tenant={other.pk}")

    brand_choices = change.context["adminform"].form.fields["brand"].queryset
    assert list(brand_choices) == [brand]
    assert [b.name for b in add.context["adminform"].form.fields["brand"].queryset] == [
        "Globex Brand"
    ]
