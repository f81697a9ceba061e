"""The launch-token protocol (pipeline.preview) without the admin, and the preview page's
money: the quote launch will freeze, the balance, and a plain word when funds are short."""

from __future__ import annotations

import copy

import pytest
from django.contrib.sessions.backends.db import SessionStore
from django.test import Client
from django.urls import reverse

from billing.selectors import available_balance
from billing.services import active_price_version, create_price_version
from pipeline.preview import (
    LaunchPreview,
    StalePreview,
    issue_launch_token,
    launch_once,
    preview_campaign,
)
from sampling.models import Campaign, Question, Run
from sampling.services import save_campaign
from tests.conftest import BASE_CAMPAIGN, spec_with_tenant

pytestmark = pytest.mark.django_db


def _campaign() -> Campaign:
    return save_campaign(spec=spec_with_tenant(copy.deepcopy(BASE_CAMPAIGN), funded=True))


def _previewed() -> tuple[Campaign, LaunchPreview, SessionStore, str]:
    """A funded tenant's campaign, its preview with a quote, and the launch token the preview
    issued in an operator's session."""
    campaign = _campaign()
    preview = preview_campaign(campaign=campaign)
    assert preview.quote is not None
    session = SessionStore()
    session.create()
    return (
        campaign,
        preview,
        session,
        issue_launch_token(session, campaign=campaign, quote=preview.quote),
    )


def test_launch_freezes_exactly_the_quote_the_preview_showed() -> None:
    campaign, preview, session, token = _previewed()
    assert preview.can_launch

    run, already = launch_once(session, campaign=campaign, token=token)

    assert not already
    assert preview.quote is not None and run.quote_snapshot == preview.quote.to_json()
    again, already = launch_once(session, campaign=campaign, token=token)
    assert already and again.pk == run.pk and Run.objects.count() == 1


def test_a_changed_price_list_refuses_the_old_preview_and_writes_nothing() -> None:
    campaign, _, session, token = _previewed()
    create_price_version(name="dearer", currency="USD", prices={"openai": {"base": 50}})
    balance = available_balance(campaign.tenant, "USD")

    with pytest.raises(StalePreview, match="price list changed"):
        launch_once(session, campaign=campaign, token=token)

    assert not Run.objects.exists()
    assert available_balance(campaign.tenant, "USD") == balance
    fresh = preview_campaign(campaign=campaign)
    assert fresh.quote is not None and fresh.quote.price_version == "dearer"
    token = issue_launch_token(session, campaign=campaign, quote=fresh.quote)
    run, _ = launch_once(session, campaign=campaign, token=token)
    assert run.quote_snapshot == fresh.quote.to_json()


def test_a_changed_campaign_or_an_unknown_token_is_refused() -> None:
    campaign, _, session, token = _previewed()
    Campaign.objects.filter(pk=campaign.pk).update(repeats=3)
    with pytest.raises(StalePreview, match="campaign changed"):
        launch_once(session, campaign=campaign, token=token)
    with pytest.raises(StalePreview, match="expired"):
        launch_once(session, campaign=campaign, token="forged")
    assert not Run.objects.exists()


def test_the_preview_page_shows_the_quote_in_major_units_and_the_balance(
    admin_client: Client,
) -> None:
    campaign = _campaign()
    page = admin_client.get(reverse("admin:sampling_campaign_preview", args=[campaign.pk]))
    html = page.content.decode()
    # BASE_CAMPAIGN: 2 questions x openai x 2 repeats = 4 samples; base 5 + screenshot 0 cents
    # (openai takes no screenshots) -> 0.20 USD.
    assert f'id="price-version">{active_price_version().name}<' in html
    assert 'id="estimated-max">0.20 USD<' in html
    assert 'id="available-balance">10000000.00 USD<' in html
    assert "openai / desktop / us / web_search" in html
    assert 'id="funds-short"' not in html and 'name="token"' in html


def test_new_question_rows_keep_the_order_they_were_typed_in(admin_client: Client) -> None:
    campaign = _campaign()
    url = reverse("admin:sampling_campaign_change", args=[campaign.pk])
    form = admin_client.get(url).context["adminform"].form
    data = {k: v for k, v in form.initial.items() if k in ("name", "repeats", "priority")}
    data.update(
        tenant=campaign.tenant_id,
        brand=campaign.brand_id,
        screenshot_policy=campaign.screenshot_policy,
        **_inline_management("competitors", campaign.competitors.count()),
        **_inline_management("targets", campaign.targets.count()),
    )
    questions = list(campaign.questions.order_by("position"))
    data.update(_inline_management("questions", len(questions), total=len(questions) + 2))
    for i, question in enumerate(questions):
        data.update(
            {
                f"questions-{i}-id": question.pk,
                f"questions-{i}-campaign": campaign.pk,
                f"questions-{i}-position": question.position,
                f"questions-{i}-text": question.current_revision.text,  # type: ignore[union-attr]
                f"questions-{i}-is_active": "on",
            }
        )
    for offset, text in enumerate(["Third question?", "Fourth question?"]):
        i = len(questions) + offset
        data.update({f"questions-{i}-text": text, f"questions-{i}-is_active": "on"})
    for i, competitor in enumerate(campaign.competitors.all()):
        data.update(
            {
                f"competitors-{i}-id": competitor.pk,
                f"competitors-{i}-position": competitor.position,
                f"competitors-{i}-name": competitor.name,
            }
        )
    for i, target in enumerate(campaign.targets.all()):
        data.update(
            {
                f"targets-{i}-id": target.pk,
                f"targets-{i}-platform": target.platform,
                f"targets-{i}-device": target.device,
                f"targets-{i}-region": target.region,
                f"targets-{i}-mode": target.mode,
            }
        )
    response = admin_client.post(url, data)
    assert response.status_code == 302, response.context["errors"]
    texts = [
        q.current_revision.text  # type: ignore[union-attr]
        for q in Question.objects.filter(campaign=campaign).order_by("position", "id")
    ]
    assert texts[-2:] == ["Third question?", "Fourth question?"]
    positions = list(
        Question.objects.filter(campaign=campaign).order_by("id").values_list("position", flat=True)
    )
    assert positions == sorted(positions) and len(set(positions)) == len(positions)


def _inline_management(prefix: str, initial: int, total: int | None = None) -> dict[str, int]:
    return {
        f"{prefix}-TOTAL_FORMS": initial if total is None else total,
        f"{prefix}-INITIAL_FORMS": initial,
        f"{prefix}-MIN_NUM_FORMS": 0,
        f"{prefix}-MAX_NUM_FORMS": 1000,
    }


def test_an_unsupported_target_is_refused_in_the_form_naming_the_target() -> None:
    from console.admin.sampling.campaigns import PlatformTargetForm

    target = {"platform": "doubao", "device": "desktop", "region": "us", "mode": "web_search"}
    form = PlatformTargetForm(data=target)

    assert not form.is_valid()
    assert form.non_field_errors() == [
        "Target doubao / desktop / us / web_search: platform 'doubao' does not support "
        "region 'us' (supported: cn)."
    ]
    assert PlatformTargetForm(data={**target, "region": "cn"}).is_valid()
