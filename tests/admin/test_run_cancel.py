"""Cancelling a run from the console (issue 29, finding 1): from the run page and from the runs
list, always through a confirmation that says what stops, what is released and what stays
charged, and then actually cancels."""

from __future__ import annotations

import re

import pytest
from django.db.models.functions import Now
from django.test import Client
from django.urls import reverse

from billing.selectors import run_billing
from billing.services.runs import post_pending_captures, queue_capture
from console.widgets import money
from sampling.models import Run, Sample, UpstreamCancel
from sampling.services import claim_upstream_cancel, record_upstream_cancel
from tests.admin.conftest import SUCCEEDED
from tests.conftest import launch_funded, make_campaign_data

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:sampling_run_changelist"


def _cancel_url(run: Run) -> str:
    return reverse("admin:sampling_run_cancel", args=[run.pk])


def _held_for_all(run: Run) -> str:
    billing = run_billing(run_id=run.pk)
    assert billing.currency and billing.held > 0
    return money(billing.held, billing.currency)


def test_the_run_page_offers_cancel_as_a_link_not_a_form_nested_in_the_change_form(
    admin_client: Client, run: Run
) -> None:
    page = admin_client.get(reverse("admin:sampling_run_change", args=[run.pk])).content.decode()

    # The admin's change form wraps every panel: a <form> inside it is dropped by the browser,
    # whose button then posted the change form (a bare 403).
    change_form = page[
        page.index('id="run_form"') : page.index("</form>", page.index('id="run_form"'))
    ]
    assert "<form" not in change_form
    assert re.search(rf'<a href="{re.escape(_cancel_url(run))}"[^>]*id="cancel-link"', page)


def test_the_cancel_page_states_what_is_released_and_what_stays_charged_and_cancels_nothing(
    admin_client: Client, run: Run
) -> None:
    held = _held_for_all(run)

    response = admin_client.get(_cancel_url(run))

    page = response.content.decode()
    assert response.status_code == 200
    assert '<span data-cancel="stopping">4 samples</span> not yet submitted' in page
    assert f'<span data-cancel="released">{held}</span> held for that work' in page
    assert '<span data-cancel="charged">0.00 USD</span> for 0 samples already answered' in page
    assert 'id="cancel-confirm"' in page
    run.refresh_from_db()
    assert run.cancelled_at is None


def test_confirming_the_cancel_page_cancels_and_releases_what_it_announced(
    admin_client: Client, run: Run
) -> None:
    held = _held_for_all(run)

    response = admin_client.post(_cancel_url(run), {"confirm": "yes"}, follow=True)

    run.refresh_from_db()
    assert run.cancelled_at is not None
    assert (
        Sample.objects.filter(
            run=run, failure_reason__startswith="cancelled in the console by "
        ).count()
        == 4
    )
    billing = run_billing(run_id=run.pk)
    assert money(billing.released_cancelled, "USD") == held and billing.held == 0
    assert "4 samples not yet submitted will not run" in response.content.decode()


def test_a_charged_sample_is_named_as_staying_charged(admin_client: Client, run: Run) -> None:
    first = Sample.objects.filter(run=run).order_by("id").first()
    assert first is not None
    Sample.objects.filter(pk=first.pk).update(**SUCCEEDED)
    queue_capture(run_id=run.pk, sample_id=first.pk)
    post_pending_captures(run_id=run.pk)
    charged = run_billing(run_id=run.pk).captured
    assert charged > 0

    page = admin_client.get(_cancel_url(run)).content.decode()

    assert '<span data-cancel="stopping">3 samples</span>' in page
    assert f'<span data-cancel="charged">{money(charged, "USD")}</span> for 1 sample ' in page


def test_the_list_action_asks_first_then_cancels_the_confirmed_runs(
    admin_client: Client, run: Run
) -> None:
    url = reverse(CHANGELIST)
    form = {"action": "cancel_runs", "_selected_action": [str(run.pk)], "index": "0"}

    asked = admin_client.post(url, form)

    page = asked.content.decode()
    assert asked.status_code == 200 and 'id="cancel-confirm-form"' in page
    assert '<span data-cancel="stopping">4 samples</span>' in page
    run.refresh_from_db()
    assert run.cancelled_at is None

    confirmed = admin_client.post(
        url,
        {"action": "cancel_runs", "_selected_action": [str(run.pk)], "confirm": "yes"},
        follow=True,
    )

    run.refresh_from_db()
    assert run.cancelled_at is not None
    assert "4 samples not yet submitted will not run" in confirmed.content.decode()


def test_the_cancel_page_of_a_finished_run_offers_nothing_to_confirm(
    admin_client: Client, run: Run
) -> None:
    run.samples.update(**SUCCEEDED)
    Run.objects.filter(pk=run.pk).update(finished_at=run.created_at)

    page = admin_client.get(_cancel_url(run)).content.decode()

    assert "Nothing to cancel: this run is finished" in page
    assert 'id="cancel-confirm"' not in page


def test_the_run_page_says_what_the_upstream_cancel_asked_and_what_was_acknowledged(
    admin_client: Client, run: Run
) -> None:
    admin_client.post(_cancel_url(run), {"confirm": "yes"})
    samples = list(Sample.objects.filter(run=run).order_by("id"))
    answers = [(True, ""), (True, ""), (False, "unreachable: connection refused"), None]
    for sample, answer in zip(samples, answers, strict=True):
        cancel = UpstreamCancel.objects.create(
            run=run, sample=sample, platform=sample.platform, upstream_id=f"tsk_{sample.pk}"
        )
        # the samples are not accepted upstream: nothing is sent
        assert claim_upstream_cancel(cancel_id=cancel.pk) is False
        UpstreamCancel.objects.filter(pk=cancel.pk).update(requested_at=Now())
        if answer is not None:
            record_upstream_cancel(cancel_id=cancel.pk, acknowledged=answer[0], error=answer[1])

    page = admin_client.get(reverse("admin:sampling_run_change", args=[run.pk])).content.decode()

    assert (
        '<p id="upstream-cancel">Upstream cancel asked for 4 tasks, acknowledged 2, 1 could not '
        "be asked, 1 without an answer yet.</p>"
    ) in page


def test_the_cancel_page_names_the_platforms_asked_to_stop_what_they_accepted(
    admin_client: Client, run: Run
) -> None:
    target = {"platform": "collector", "device": "desktop", "region": "us", "mode": "web_search"}
    collected = launch_funded(make_campaign_data(questions=1, targets=[target], repeats=1))
    Sample.objects.filter(run=collected).update(
        submission_state="accepted", upstream_id="tsk_1", step="poll"
    )

    page = admin_client.get(_cancel_url(collected)).content.decode()
    assert '<span data-cancel="stopped_upstream">collector</span> can stop tasks' in page
    # An OpenAI run's answers come back in the call: nothing accepted to stop.
    assert "stopped_upstream" not in admin_client.get(_cancel_url(run)).content.decode()
