"""Each role's main flow in real Chromium (Debian's, driven by Playwright, loopback only).
Screenshots of every main page are written to var/artefacts/browser/ as test artefacts."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from billing.models import JournalEntry
from billing.services import active_price_version
from evidence.models import ReviewDecision
from sampling.models import Brand, Run, Sample
from tenancy.models import Tenant
from tenancy.services import grant_role
from tests.chromium import chromium, log_in, needs_browser
from tests.conftest import fund_tenant
from tests.evidence.helpers import COLLECTOR, collected_run
from tests.inprocess import drive_in_process
from tests.world import PASSWORD

ARTEFACTS = Path(settings.BASE_DIR) / "var" / "artefacts" / "browser"

pytestmark = [*needs_browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    # Playwright's sync API keeps an event loop in this thread; the test's own ORM calls
    # (setup and checks) are plain blocking calls between browser steps.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    with chromium() as browser:
        yield browser


def _page(browser: Any, live_server: Any, username: str) -> Any:
    page = browser.new_page(viewport={"width": 1400, "height": 1000}, accept_downloads=True)
    log_in(page, f"{live_server.url}/admin/login/", username, PASSWORD)
    page.wait_for_selector("#site-name")
    return page


def _shot(page: Any, name: str) -> Path:
    path = ARTEFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.read_bytes().startswith(b"\x89PNG")
    return path


def _drive_in_background(run_id: Any) -> threading.Thread:
    """The workers' part, in-process against the simulator, while the browser watches."""

    def work() -> None:
        try:
            drive_in_process(run_id)
        finally:
            connection.close()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def test_operator_creates_previews_launches_watches_and_opens_the_report(
    live_server: Any,
    browser: Any,
    simulator: Any,
    local_storage: Any,
) -> None:
    tenant = fund_tenant(Tenant.objects.create(slug="alpha", name="Alpha Inc"))
    Brand.objects.create(tenant=tenant, name="Acme", aliases=["ACME"], domains=["acme.com"])
    grant_role(username="olga", tenant=tenant, role="operator", password=PASSWORD)
    page = _page(browser, live_server, "olga")
    _shot(page, "operator-1-index")

    page.goto(f"{live_server.url}/admin/sampling/campaign/add/")
    page.select_option("#id_tenant", label="alpha")
    page.fill("#id_name", "Browser campaign")
    page.select_option("#id_brand", label="Acme")
    page.fill("#id_repeats", "1")
    page.select_option("#id_screenshot_policy", "none")
    page.click("#targets-group .add-row a")
    page.select_option("#id_targets-0-platform", "openai")
    page.select_option("#id_targets-0-device", "desktop")
    page.select_option("#id_targets-0-region", "us")
    page.select_option("#id_targets-0-mode", "web_search")
    page.fill("#id_questions-0-text", "Which CRM is best for a small team?")
    page.click("#questions-group .add-row a")
    page.fill("#id_questions-1-text", "Is Acme good value?")
    _shot(page, "operator-2-campaign-form")
    page.click("input[name=_continue]")
    page.wait_for_selector(".messagelist .success")

    page.click("text=Preview plan")
    page.wait_for_selector("#quote")
    _shot(page, "operator-3-preview-with-quote")
    assert page.inner_text("#sample-count") == "2"
    assert page.inner_text("#price-version") == active_price_version().name
    assert page.inner_text("#estimated-max") == "0.10 USD"  # 2 samples x openai base 5 cents
    assert "USD" in page.inner_text("#available-balance")
    assert page.locator("#questions li").all_inner_texts() == [
        "Which CRM is best for a small team?",
        "Is Acme good value?",
    ]
    preview_url = page.url
    token = page.input_value("#launch-form input[name=token]")
    csrf = page.input_value("#launch-form input[name=csrfmiddlewaretoken]")
    launch_url = live_server.url + page.get_attribute("#launch-form", "action")
    page.click("#launch-form input[type=submit]")
    page.wait_for_selector("#run-status")
    _shot(page, "operator-4-run-launched")
    run = Run.objects.get()
    worker = _drive_in_background(run.pk)
    # A function, not an expression: Playwright evals a bare expression in the page, which
    # the console's Content-Security-Policy forbids (no 'unsafe-eval', console/csp.py).
    page.wait_for_function(
        "() => document.querySelector('#run-status').dataset.finished === '1'", timeout=60_000
    )  # the page polls, then reloads itself once the run is finished
    worker.join(timeout=60)
    _shot(page, "operator-5-run-finished")
    assert page.inner_text("#run-status .geo-badge") == "All succeeded"
    assert "2 of 2 samples terminal (100%)" in page.inner_text("#run-status")
    assert "charged" in page.inner_text("#run-money") and "USD" in page.inner_text("#run-money")
    assert page.locator("#run-platforms tr[data-platform=openai]").count() == 1

    page.click("#report-link")
    frame = page.frame_locator("#report-frame")
    frame.locator("h1").wait_for()
    _shot(page, "operator-6-report")
    assert "Browser campaign" in frame.locator("header").inner_text()
    with page.expect_download() as download:
        page.click("#report-downloads a[data-format=csv]")
    assert download.value.suggested_filename.endswith("-report.csv")

    # The same preview confirmed a second time (Back, then Confirm): refused, no second run.
    again = page.request.post(
        launch_url,
        form={"token": token, "csrfmiddlewaretoken": csrf},
        headers={"Referer": preview_url},
    )
    assert again.ok and "no second run was launched" in again.text()
    assert Run.objects.count() == 1


def test_analyst_opens_a_partial_evidence_sample_views_its_screenshot_and_decides(
    live_server: Any,
    browser: Any,
    simulator: Any,
    local_storage: Any,
) -> None:
    run = collected_run(COLLECTOR, questions=1, tenant="alpha", screenshot_policy="optional")
    sample = Sample.objects.get(run=run)
    Sample.objects.filter(pk=sample.pk).update(
        evidence_state="partial", evidence_reason="CITATIONS_UNAVAILABLE"
    )
    grant_role(username="anna", tenant=Tenant.objects.get(slug="alpha"), role="analyst",
               password=PASSWORD)  # fmt: skip
    page = _page(browser, live_server, "anna")
    page.goto(f"{live_server.url}/admin/evidence/reviewsample/")
    _shot(page, "analyst-1-review-queue")
    page.click(f"#result_list a[href$='/{sample.pk}/change/']")
    page.wait_for_selector(".geo-decide")
    _shot(page, "analyst-2-review-detail")
    thumb = page.locator(f"img[alt='screenshot thumbnail of sample {sample.pk}']")
    assert thumb.evaluate("img => img.complete && img.naturalWidth > 0")
    full = page.locator(f"a:has(img[alt='screenshot thumbnail of sample {sample.pk}'])")
    image = page.request.get(live_server.url + full.get_attribute("href"))
    assert image.status == 200 and image.headers["content-type"].startswith("image/")
    page.click("button[value=acknowledged]")
    page.wait_for_selector(".messagelist .success")
    _shot(page, "analyst-3-after-decision")

    page.goto(f"{live_server.url}/admin/sampling/sample/{sample.pk}/change/")
    _shot(page, "analyst-4-sample-page")
    decisions = page.inner_text(".field-review")
    assert "Partial evidence acknowledged" in decisions and "anna" in decisions
    assert page.locator(".field-latest_screenshot img.geo-thumb").count() == 1
    page.goto(f"{live_server.url}/admin/analysis/mention/?run={run.pk}")
    _shot(page, "analyst-5-mentions")
    assert "Totals for this selection" in page.inner_text("#mention-totals")
    page.close()
    assert ReviewDecision.objects.filter(sample=sample, decision="acknowledged").count() == 1


def test_finance_tops_up_reads_ledger_and_reconciliation_and_downloads_csv_and_xlsx(
    live_server: Any,
    browser: Any,
    simulator: Any,
    local_storage: Any,
) -> None:
    run = collected_run(COLLECTOR, questions=2, tenant="alpha")
    tenant = Tenant.objects.get(slug="alpha")
    grant_role(username="fiona", tenant=tenant, role="finance", password=PASSWORD)
    before = JournalEntry.objects.filter(kind="top_up", tenant=tenant).count()
    page = _page(browser, live_server, "fiona")
    _shot(page, "finance-1-index")
    page.goto(f"{live_server.url}/admin/billing/account/")
    page.click("#top-up-link")
    page.select_option("#id_tenant", label="alpha")
    page.fill("#id_amount", "250.00")
    page.fill("#id_key", "payment-0001")
    _shot(page, "finance-2-top-up-form")
    page.click("#top-up-form input[type=submit]")
    page.wait_for_selector(".messagelist .success")
    assert "Alpha: 250.00 USD credited" in page.inner_text(".messagelist")  # capfirst
    _shot(page, "finance-3-accounts")

    page.goto(f"{live_server.url}/admin/billing/journalentry/")
    _shot(page, "finance-4-ledger")
    page.click("#reconciliation-link")
    page.select_option("#recon-run", str(run.pk))
    page.click("#recon-form button[type=submit]:not([name])")
    page.wait_for_selector("#recon-totals")
    _shot(page, "finance-5-reconciliation")
    assert "USD" in page.inner_text("#recon-totals")
    assert "missing_upstream" in page.inner_text("#recon-explanations")
    with page.expect_download() as csv_download:
        page.click("#recon-csv")
    csv_path = ARTEFACTS / "finance-reconciliation.csv"
    csv_download.value.save_as(str(csv_path))
    with page.expect_download() as xlsx_download:
        page.click("#recon-xlsx")
    xlsx_path = ARTEFACTS / "finance-reconciliation.xlsx"
    xlsx_download.value.save_as(str(xlsx_path))
    page.close()
    assert csv_path.read_text().startswith("platform,upstream_id")
    assert xlsx_path.read_bytes()[:2] == b"PK"
    assert JournalEntry.objects.filter(kind="top_up", tenant=tenant).count() == before + 1
