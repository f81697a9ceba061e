"""Campaign editing in the admin: question text lives in immutable revisions."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
from django.http import HttpResponse
from django.test import Client
from django.urls import reverse

from sampling.models import Brand, Campaign, Question, QuestionRevision
from tenancy.models import Tenant

OPENAI_TARGET = {"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"}


def _formset(prefix: str, rows: list[dict[str, Any]], initial: int = 0) -> dict[str, Any]:
    data: dict[str, Any] = {
        f"{prefix}-TOTAL_FORMS": len(rows),
        f"{prefix}-INITIAL_FORMS": initial,
        f"{prefix}-MIN_NUM_FORMS": 0,
        f"{prefix}-MAX_NUM_FORMS": 1000,
    }
    for i, row in enumerate(rows):
        data.update({f"{prefix}-{i}-{key}": value for key, value in row.items()})
    return data


def _campaign_post(
    tenant: Tenant,
    brand: Brand,
    questions: list[dict[str, Any]],
    *,
    targets: list[dict[str, Any]] | None = None,
    initial_questions: int = 0,
    initial_targets: int = 0,
) -> dict[str, Any]:
    return {
        "tenant": tenant.pk,
        "name": "Launch week",
        "brand": brand.pk,
        "repeats": 2,
        "screenshot_policy": "optional",
        "priority": 0,
        **_formset(
            "competitors",
            [{"position": 0, "name": "Globex", "aliases": "GLOBEX\n环球", "domains": "globex.com"}],
        ),
        **_formset(
            "targets",
            targets or [OPENAI_TARGET],
            initial_targets,
        ),
        **_formset("questions", questions, initial_questions),
        "_save": "Save",
    }


@pytest.fixture
def tenant(db: None) -> Tenant:
    return Tenant.objects.create(slug="acme", name="Acme Corp")


@pytest.fixture
def brand(tenant: Tenant) -> Brand:
    return Brand.objects.create(tenant=tenant, name="Acme", aliases=["ACME"], domains=["acme.com"])


def _add_campaign(admin_client: Client, tenant: Tenant, brand: Brand) -> Campaign:
    questions = [
        {"position": 0, "text": "Which CRM is best for a small team?", "is_active": "on"},
        {"position": 1, "text": "  哪个CRM   最适合小团队？ ", "is_active": "on"},
    ]
    response = admin_client.post(
        reverse("admin:sampling_campaign_add"), _campaign_post(tenant, brand, questions)
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    return Campaign.objects.get(name="Launch week")


@pytest.mark.django_db
def test_adding_a_campaign_with_inline_questions_creates_revision_one_of_each(
    admin_client: Client, tenant: Tenant, brand: Brand
) -> None:
    campaign = _add_campaign(admin_client, tenant, brand)

    revisions = QuestionRevision.objects.filter(question__campaign=campaign).order_by("question")
    assert [(r.revision_no, r.text) for r in revisions] == [
        (1, "Which CRM is best for a small team?"),
        (1, "哪个CRM   最适合小团队？"),  # as typed: only the surrounding spaces go
    ]
    assert all(q.current_revision is not None for q in campaign.questions.all())
    competitor = campaign.competitors.get()
    assert (competitor.aliases, competitor.domains) == (["GLOBEX", "环球"], ["globex.com"])
    assert campaign.targets.get().platform == "openai"


Edited = tuple[Campaign, Question, Question, HttpResponse]


@pytest.fixture
def edit_questions(admin_client: Client, tenant: Tenant, brand: Brand) -> Callable[..., Edited]:
    """Add the campaign, then post its change form with the two questions' texts replaced
    (its target and competitor unchanged), answered with `status`. Returns the campaign, its
    two questions and the response."""
    return functools.partial(_edit_questions, admin_client, tenant, brand)


def _edit_questions(
    admin_client: Client, tenant: Tenant, brand: Brand, texts: tuple[str, str], *, status: int
) -> Edited:
    campaign = _add_campaign(admin_client, tenant, brand)
    first, second = campaign.questions.order_by("position")
    questions = [
        {"id": question.pk, "position": position, "text": text, "is_active": "on"}
        for position, (question, text) in enumerate(zip((first, second), texts, strict=True))
    ]
    target = {"id": campaign.targets.get().pk, **OPENAI_TARGET}
    data = _campaign_post(
        tenant, brand, questions, initial_questions=2, initial_targets=1, targets=[target]
    )
    data.update({"competitors-TOTAL_FORMS": 0})
    response = admin_client.post(
        reverse("admin:sampling_campaign_change", args=[campaign.pk]), data
    )
    assert response.status_code == status, response.content.decode()[:3000]
    return campaign, first, second, response


@pytest.mark.django_db
def test_editing_question_text_creates_revision_two_and_keeps_revision_one(
    admin_client: Client, edit_questions: Callable[..., Edited]
) -> None:
    texts = ("Which CRM is best for a team of five?", "哪个CRM   最适合小团队？")
    campaign, first, second, _ = edit_questions(texts, status=302)

    first.refresh_from_db()
    assert [(r.revision_no, r.text) for r in first.revisions.order_by("revision_no")] == [
        (1, "Which CRM is best for a small team?"),
        (2, "Which CRM is best for a team of five?"),
    ]
    assert first.current_revision is not None and first.current_revision.revision_no == 2
    # Unchanged text keeps its revision.
    assert list(second.revisions.values_list("revision_no", flat=True)) == [1]
    page = admin_client.get(reverse("admin:sampling_campaign_change", args=[campaign.pk]))
    assert "r2" in page.content.decode()
    assert "Which CRM is best for a team of five?" in page.content.decode()


@pytest.mark.django_db
def test_clearing_a_question_text_is_rejected_and_keeps_its_revision(edit_questions: Any) -> None:
    _, first, _, response = edit_questions(("   ", "哪个CRM   最适合小团队？"), status=200)

    assert "This field is required." in response.content.decode()
    assert list(first.revisions.values_list("revision_no", flat=True)) == [1]


@pytest.mark.django_db
def test_brand_of_another_tenant_is_rejected(
    admin_client: Client, tenant: Tenant, brand: Brand
) -> None:
    other = Tenant.objects.create(slug="globex", name="Globex")
    data = _campaign_post(other, brand, [{"position": 0, "text": "Q?", "is_active": "on"}])

    response = admin_client.post(reverse("admin:sampling_campaign_add"), data)

    assert response.status_code == 200
    assert "belongs to another tenant" in response.content.decode()
    assert not Campaign.objects.exists()


@pytest.mark.django_db
def test_tenant_and_brand_admin_pages_render(admin_client: Client, brand: Brand) -> None:
    assert admin_client.get(reverse("admin:tenancy_tenant_changelist")).status_code == 200
    page = admin_client.get(reverse("admin:sampling_brand_change", args=[brand.pk]))
    assert page.status_code == 200
    assert "acme.com" in page.content.decode()


@pytest.mark.django_db
def test_a_questions_topics_are_edited_on_the_campaign_page_without_a_new_revision(
    admin_client: Client, tenant: Tenant, brand: Brand
) -> None:
    campaign = _add_campaign(admin_client, tenant, brand)
    first, second = campaign.questions.order_by("position")
    questions = [
        {
            "id": q.pk,
            "position": i,
            "text": q.current_revision.text if q.current_revision else "",
            "topics": topics,
            "is_active": "on",
        }
        for i, (q, topics) in enumerate(
            ((first, " pricing ,  small   teams, pricing"), (second, ""))
        )
    ]
    target = {"id": campaign.targets.get().pk, **OPENAI_TARGET}
    data = _campaign_post(
        tenant, brand, questions, initial_questions=2, initial_targets=1, targets=[target]
    )
    data.update({"competitors-TOTAL_FORMS": 0})
    response = admin_client.post(
        reverse("admin:sampling_campaign_change", args=[campaign.pk]), data
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.topics, second.topics) == (["pricing", "small teams"], [])
    assert list(first.revisions.values_list("revision_no", flat=True)) == [1]
    page = admin_client.get(reverse("admin:sampling_campaign_change", args=[campaign.pk]))
    assert 'value="pricing, small teams"' in page.content.decode()
    listing = admin_client.get(reverse("admin:sampling_question_changelist"))
    assert "pricing, small teams" in listing.content.decode()
