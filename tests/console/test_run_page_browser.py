"""The run page as a person uses it, in real Chromium (issue 29, findings 1 and 3): cancel
through a confirmation that actually cancels, from the page and from the runs list, and every
panel of the page live during a run without a reload. Screenshots go to var/screens/."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from billing.selectors import run_billing
from billing.services.runs import post_pending_captures, queue_capture
from pipeline.launch import launch_run
from pipeline.runs import finish_run_if_done
from sampling.models import Run, Sample
from tenancy.services import grant_role
from tests.admin.conftest import SUCCEEDED, make_campaign
from tests.chromium import chromium, log_in, needs_browser
from tests.world import PASSWORD

SCREENS = Path(settings.BASE_DIR) / "var" / "screens"

pytestmark = [*needs_browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    # The test's own ORM calls run between browser steps, in Playwright's thread.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    SCREENS.mkdir(parents=True, exist_ok=True)
    with chromium() as browser:
        yield browser


@pytest.fixture
def run() -> Run:
    """4 openai samples in one batch, money held; an operator of its tenant, `olga`."""
    run = launch_run(campaign=make_campaign())
    grant_role(username="olga", tenant=run.tenant, role="operator", password=PASSWORD)
    return run


def _operator_page(browser: Any, live_server: Any, path: str) -> Any:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    log_in(page, f"{live_server.url}/admin/login/?next={path}", "olga", PASSWORD)
    return page


def _shot(page: Any, name: str) -> None:
    page.screenshot(path=str(SCREENS / f"{name}.png"), full_page=True)


def _succeed(run: Run, count: int) -> None:
    """The first `count` samples answered and charged, as the workers would leave them."""
    ids = list(Sample.objects.filter(run=run).order_by("id").values_list("id", flat=True))
    Sample.objects.filter(id__in=ids[:count]).update(**SUCCEEDED)
    for sample_id in ids[:count]:
        queue_capture(run_id=run.pk, sample_id=sample_id)
    post_pending_captures(run_id=run.pk)


def test_cancel_from_the_run_page_confirms_what_is_released_then_cancels(
    live_server: Any, browser: Any, run: Run
) -> None:
    page = _operator_page(browser, live_server, f"/admin/sampling/run/{run.pk}/change/")
    page.click("#cancel-link")
    page.wait_for_selector("#cancel-confirm-form")
    _shot(page, "run-cancel-confirmation")
    effects = page.inner_text(".geo-cancel-effects")
    assert "4 samples not yet submitted will not run" in effects
    assert "0.20 USD held for that work goes back to the tenant's balance" in effects
    assert "Stays charged: 0.00 USD" in effects
    assert Run.objects.get(pk=run.pk).cancelled_at is None  # asking cancels nothing

    page.click("#cancel-confirm")
    page.wait_for_selector(".messagelist .success")
    _shot(page, "run-cancelled")

    assert "4 samples not yet submitted will not run" in page.inner_text(".messagelist")
    assert page.locator("#run-cancelled").count() == 1 and page.locator("#cancel-link").count() == 0
    assert Run.objects.get(pk=run.pk).cancelled_at is not None
    assert run_billing(run_id=run.pk).released_cancelled == 20

    # A page that is not there is a console page with a way back (finding 10).
    page.goto(f"{live_server.url}/admin/sampling/run/{uuid.uuid4()}/change/")
    _shot(page, "console-404")
    assert page.inner_text("h1") == "Not found (404)"
    page.click("#error-home")
    assert page.inner_text("#home-title") == "Campaigns, runs and evidence"


def test_cancel_from_the_runs_list_asks_first_and_keep_running_cancels_nothing(
    live_server: Any, browser: Any, run: Run
) -> None:
    page = _operator_page(browser, live_server, "/admin/sampling/run/")
    page.check(f"input[name=_selected_action][value='{run.pk}']")
    page.select_option("select[name=action]", "cancel_runs")
    page.click("button[name=index]")
    page.wait_for_selector("#cancel-confirm-form")
    assert "Released: 0.20 USD" in page.inner_text(".geo-cancel-effects")
    page.click("#cancel-back")
    page.wait_for_selector("#result_list")
    assert Run.objects.get(pk=run.pk).cancelled_at is None

    page.check(f"input[name=_selected_action][value='{run.pk}']")
    page.select_option("select[name=action]", "cancel_runs")
    page.click("button[name=index]")
    page.click("#cancel-confirm")
    page.wait_for_selector(".messagelist .success")

    assert Run.objects.get(pk=run.pk).cancelled_at is not None


def _cell(page: Any, selector: str) -> str:
    return str(page.inner_text(selector)).strip()


def test_every_panel_of_the_run_page_follows_the_run_without_a_reload(
    live_server: Any, browser: Any, run: Run
) -> None:
    page = _operator_page(browser, live_server, f"/admin/sampling/run/{run.pk}/change/")
    page.wait_for_selector("#run-status")
    page.evaluate("window.sameDocument = true")  # gone if the page reloaded
    platform = "#run-platforms tr[data-platform=openai]"
    batch = "#run-batches tr[data-batch='0']"
    assert _cell(page, f"{platform} td[data-count=pending]") == "4"
    assert _cell(page, "#run-money [data-money=charged]") == "0.00 USD"

    _succeed(run, 2)
    page.wait_for_function(  # a function: the console's CSP forbids eval of an expression
        "() => document.querySelector('#run-status [data-count=succeeded]').textContent === '2'"
    )
    _shot(page, "run-live-halfway")

    # Every panel shows the same moment: none keeps its launch-time values.
    assert _cell(page, f"{platform} td[data-count=succeeded]") == "2"
    assert _cell(page, f"{platform} td[data-count=pending]") == "2"
    assert _cell(page, f"{batch} td[data-count=succeeded]") == "2"
    assert _cell(page, "[data-layer-state='analysis.accepted']") == "2"
    assert _cell(page, "#run-money [data-money=charged]") == "0.10 USD"
    assert _cell(page, "#run-money [data-money=samples_charged]") == "2"

    _succeed(run, 4)
    finish_run_if_done(run_id=run.pk)
    page.wait_for_function("() => document.querySelector('#run-status').dataset.finished === '1'")
    _shot(page, "run-live-finished")

    assert page.evaluate("window.sameDocument") is True
    assert _cell(page, "#run-status .geo-badge") == "All succeeded"
    assert _cell(page, f"{platform} td[data-count=succeeded]") == "4"
    assert _cell(page, f"{batch} .geo-badge") == "All succeeded"
    assert _cell(page, "#run-money [data-money=held]") == "0.00 USD"
    assert _cell(page, ".field-finished_at .readonly") != "–"
    assert page.locator("#cancel-link").count() == 0 and page.locator("#live-note").count() == 0


# WCAG's contrast ratio of an element's text on its own background, in the page.
CONTRAST = """el => {
  const rgb = c => c.match(/[0-9.]+/g).slice(0, 3).map(Number).map(v => v / 255)
    .map(v => v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4));
  const lum = c => { const [r, g, b] = rgb(c); return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  const style = getComputedStyle(el);
  const [a, b] = [lum(style.color), lum(style.backgroundColor)].sort((x, y) => y - x);
  return (a + 0.05) / (b + 0.05);
}"""


def test_the_review_pages_legend_chips_read_in_dark_mode(
    live_server: Any, browser: Any, run: Run
) -> None:
    _succeed(run, 1)
    sample = Sample.objects.filter(run=run, validity="valid").get()
    Sample.objects.filter(pk=sample.pk).update(evidence_state="partial")
    grant_role(username="anna", tenant=run.tenant, role="analyst", password=PASSWORD)
    page = browser.new_page(viewport={"width": 1400, "height": 1000}, color_scheme="dark")
    review = f"/admin/evidence/reviewsample/{sample.pk}/change/"
    log_in(page, f"{live_server.url}/admin/login/?next={review}", "anna", PASSWORD)
    page.wait_for_selector("mark.geo-brand")
    _shot(page, "review-dark")

    for chip in ("mark.geo-brand", "mark.geo-competitor"):
        assert page.locator(chip).first.evaluate(CONTRAST) >= 4.5, chip
