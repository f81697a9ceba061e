"""Plan preview and launch from the campaign admin."""

from __future__ import annotations

import threading

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from sampling.models import Campaign, PlatformTarget, Question, Run
from sampling.planning import PlanError
from sampling.services import campaign_as_spec, revise_question
from tests.admin.conftest import make_campaign, preview_token
from tests.conftest import make_campaign_data

FOUR_COLLECTOR_TARGETS = [
    {"platform": "collector", "device": device, "region": region, "mode": "web_search"}
    for device in ("desktop", "mobile")
    for region in ("us", "cn")
]


def _preview(client: Client, campaign: Campaign) -> str:
    response = client.get(reverse("admin:sampling_campaign_preview", args=[campaign.pk]))
    assert response.status_code == 200
    return response.content.decode()


def _launch(client: Client, campaign: Campaign, token: str) -> str:
    response = client.post(
        reverse("admin:sampling_campaign_launch", args=[campaign.pk]), {"token": token}
    )
    assert response.status_code == 302
    return str(response["Location"])


@pytest.mark.django_db
def test_preview_shows_sample_count_and_batches(admin_client: Client) -> None:
    campaign = make_campaign(
        make_campaign_data(questions=20, targets=FOUR_COLLECTOR_TARGETS, repeats=2)
    )

    page = _preview(admin_client, campaign)

    assert '<span id="sample-count">160</span> samples in 2 batches' in page
    assert '<tr class="batch"><td>0</td><td>collector</td><td>100</td></tr>' in page
    assert '<tr class="batch"><td>1</td><td>collector</td><td>60</td></tr>' in page
    assert '<span id="duplicate-count">0</span>' in page
    assert 'name="csrfmiddlewaretoken"' in page
    assert Run.objects.count() == 0  # previewing launches nothing


@pytest.mark.django_db
def test_preview_reports_duplicates_dropped(admin_client: Client) -> None:
    campaign = make_campaign()  # 2 questions x 1 target x 2 repeats
    duplicate = Question.objects.create(campaign=campaign, position=5)
    revise_question(question=duplicate, text="  Which CRM is best for a   small team? ")

    page = _preview(admin_client, campaign)

    assert '<span id="sample-count">4</span>' in page
    assert '<span id="duplicate-count">1</span>' in page
    assert "<td>questions[2]</td><td>questions[0]</td>" in page


@pytest.mark.django_db
def test_invalid_campaign_preview_shows_every_problem_and_no_launch_button(
    admin_client: Client,
) -> None:
    campaign = make_campaign()
    Campaign.objects.filter(pk=campaign.pk).update(repeats=0, screenshot_policy="required")
    PlatformTarget.objects.create(campaign=campaign, platform="nosuch", region="us")
    blank = Question.objects.create(campaign=campaign, position=9)
    revise_question(question=blank, text="   ")
    campaign.refresh_from_db()
    with pytest.raises(PlanError) as raised:
        campaign_as_spec(campaign=campaign)
    problems = raised.value.problems

    page = _preview(admin_client, campaign)

    assert len(problems) >= 4
    assert f"{len(problems)} problems" in page
    for problem in problems:
        assert f"<li>{escape(problem)}</li>" in page
    assert "cannot take screenshots" in page
    assert "unknown platform" in page
    assert "questions[2]: must not be empty" in page
    assert "repeats: 0 is not possible: each question is asked 1 to 100 times" in page
    assert 'name="token"' not in page


@pytest.mark.django_db
def test_confirm_launches_one_run_and_redirects_to_it(admin_client: Client) -> None:
    campaign = make_campaign()
    token = preview_token(admin_client, campaign)

    location = _launch(admin_client, campaign, token)

    run = Run.objects.get()
    assert location == reverse("admin:sampling_run_change", args=[run.pk])
    assert run.planned_samples == 4
    assert run.samples.count() == 4


@pytest.mark.django_db
def test_double_post_of_one_preview_launches_exactly_one_run(admin_client: Client) -> None:
    campaign = make_campaign()
    token = preview_token(admin_client, campaign)

    first = _launch(admin_client, campaign, token)
    second = _launch(admin_client, campaign, token)

    assert Run.objects.count() == 1
    assert first == second  # the repeat lands on the run the first POST launched
    page = admin_client.get(second).content.decode()
    assert "already launched (this run); no second run was launched" in page


@pytest.mark.postgresql("two concurrent writers (SQLite's test DB locks the table)")
@pytest.mark.django_db(transaction=True)
def test_concurrent_confirms_of_one_preview_launch_one_run(django_user_model: type) -> None:
    user = django_user_model.objects.create_superuser("ops", "ops@example.com", "pw")
    campaign = make_campaign()
    browser = Client()
    browser.force_login(user)
    token = preview_token(browser, campaign)
    session_id = browser.cookies[settings.SESSION_COOKIE_NAME].value
    start = threading.Barrier(2)
    locations: list[str] = []

    def confirm() -> None:
        tab = Client()
        tab.cookies[settings.SESSION_COOKIE_NAME] = session_id  # same session, two requests
        start.wait()
        try:
            locations.append(_launch(tab, campaign, token))
        finally:
            connection.close()

    threads = [threading.Thread(target=confirm) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    run = Run.objects.get()
    assert locations == [reverse("admin:sampling_run_change", args=[run.pk])] * 2


@pytest.mark.django_db
def test_a_new_preview_can_launch_a_second_run(admin_client: Client) -> None:
    campaign = make_campaign()
    _launch(admin_client, campaign, preview_token(admin_client, campaign))

    _launch(admin_client, campaign, preview_token(admin_client, campaign))

    assert Run.objects.count() == 2


@pytest.mark.django_db
def test_unknown_token_launches_nothing(admin_client: Client) -> None:
    campaign = make_campaign()

    location = _launch(admin_client, campaign, "forged")

    assert location == reverse("admin:sampling_campaign_preview", args=[campaign.pk])
    assert Run.objects.count() == 0


@pytest.mark.django_db
def test_campaign_changed_after_preview_is_not_launched(admin_client: Client) -> None:
    campaign = make_campaign()
    token = preview_token(admin_client, campaign)
    Campaign.objects.filter(pk=campaign.pk).update(repeats=3)

    location = _launch(admin_client, campaign, token)

    assert Run.objects.count() == 0
    page = admin_client.get(location).content.decode()
    assert "The campaign changed after this preview" in page
    assert '<span id="sample-count">6</span>' in page


@pytest.mark.django_db
def test_launch_refused_with_a_value_error_shows_its_message(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from billing.services import InsufficientFunds

    def refuse(**kwargs: object) -> Run:  # the balance was spent between preview and launch
        raise InsufficientFunds(tenant="acme", available=100, required=4000, currency="USD")

    monkeypatch.setattr("pipeline.preview.launch_run", refuse)
    campaign = make_campaign()
    token = preview_token(admin_client, campaign)

    response = admin_client.post(
        reverse("admin:sampling_campaign_launch", args=[campaign.pk]),
        {"token": token},
        follow=True,
    )

    assert response.status_code == 200
    assert (
        "Not launched: tenant &#x27;acme&#x27; cannot launch this run: available balance 1.00 USD"
        in (response.content.decode())
    )
    assert Run.objects.count() == 0


@pytest.mark.django_db
def test_launch_requires_post(admin_client: Client) -> None:
    campaign = make_campaign()

    response = admin_client.get(reverse("admin:sampling_campaign_launch", args=[campaign.pk]))

    assert response.status_code == 405
    assert Run.objects.count() == 0


@pytest.mark.django_db
def test_changelist_action_and_object_tool_lead_to_the_preview(admin_client: Client) -> None:
    campaign = make_campaign()
    preview_url = reverse("admin:sampling_campaign_preview", args=[campaign.pk])

    change_page = admin_client.get(reverse("admin:sampling_campaign_change", args=[campaign.pk]))
    response = admin_client.post(
        reverse("admin:sampling_campaign_changelist"),
        {"action": "preview_plan_action", "_selected_action": [campaign.pk]},
    )

    assert f'href="{preview_url}"' in change_page.content.decode()
    assert response.status_code == 302 and response["Location"] == preview_url
