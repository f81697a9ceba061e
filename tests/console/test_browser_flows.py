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

from billing.models import (
    JournalEntry,
    StatementVoid,
    UpstreamStatement,
    UpstreamStatementLine,
)
from billing.services import active_price_version
from evidence.models import ReviewDecision
from sampling.models import Brand, Run, Sample
from tenancy.models import Tenant
from tenancy.services import grant_platform_finance, grant_role
from tests.billing.conftest import run_queued_imports
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


def _create_campaign(page: Any, live_server: Any) -> None:
    """The campaign form, filled as an operator does: a brand of the tenant's own, a
    competitor, three platforms and two questions that name both."""
    page.goto(f"{live_server.url}/admin/sampling/campaign/add/")
    page.select_option("#id_tenant", label="alpha")
    page.fill("#id_name", "Browser campaign")
    page.select_option("#id_brand", label="Zephyrcloud")
    page.fill("#id_repeats", "2")
    page.select_option("#id_screenshot_policy", "none")
    page.click("#competitors-group .add-row a")
    page.fill("#id_competitors-0-name", "Brightwave")
    page.fill("#id_competitors-0-domains", "brightwave.io")
    for row, platform in enumerate(PLATFORMS):
        page.click("#targets-group .add-row a")
        page.select_option(f"#id_targets-{row}-platform", platform)
        page.select_option(f"#id_targets-{row}-device", "desktop")
        page.select_option(f"#id_targets-{row}-region", "us")
        page.select_option(f"#id_targets-{row}-mode", "web_search")
    page.fill("#id_questions-0-text", QUESTIONS[0])
    page.click("#questions-group .add-row a")
    page.fill("#id_questions-1-text", QUESTIONS[1])
    _shot(page, "operator-3-campaign-form")
    page.click("input[name=_continue]")
    page.wait_for_selector(".messagelist .success")


def _preview_and_launch(page: Any) -> None:
    page.click("text=Preview plan")
    page.wait_for_selector("#quote")
    page.click("#launch-form input[type=submit]")
    page.wait_for_selector("#run-status")


# Three platforms the simulator answers through their own protocols, and two questions that
# name the brand and its competitor: the simulator answers about the entities a question names
# (docs/decisions.md, "The simulator answers about the campaign's own entities").
PLATFORMS = ("openai", "anthropic", "perplexity")
QUESTIONS = (
    "Is Zephyrcloud better than Brightwave for a small team?",
    "Zephyrcloud or Brightwave: which is cheaper for startups?",
)


def test_operator_walks_brand_campaign_preview_launch_live_page_cancel_and_report(
    live_server: Any,
    browser: Any,
    simulator: Any,
    local_storage: Any,
) -> None:
    tenant = fund_tenant(Tenant.objects.create(slug="alpha", name="Alpha Inc"))
    grant_role(username="olga", tenant=tenant, role="operator", password=PASSWORD)
    page = _page(browser, live_server, "olga")
    _shot(page, "operator-1-index")

    # A brand of the operator's own, typed in the console.
    page.goto(f"{live_server.url}/admin/sampling/brand/add/")
    page.select_option("#id_tenant", label="alpha")
    page.fill("#id_name", "Zephyrcloud")
    page.fill("#id_aliases", "Zephyr Cloud")
    page.fill("#id_domains", "zephyrcloud.example")
    _shot(page, "operator-2-brand-form")
    page.click("input[name=_save]")
    page.wait_for_selector(".messagelist .success")
    assert Brand.objects.get(name="Zephyrcloud").tenant == tenant

    _create_campaign(page, live_server)
    page.click("text=Preview plan")
    page.wait_for_selector("#quote")
    _shot(page, "operator-4-preview-with-quote")
    assert page.inner_text("#sample-count") == "12"  # 3 platforms x 2 questions x 2 repeats
    assert page.inner_text("#price-version") == active_price_version().name
    assert page.inner_text("#estimated-max") == "0.64 USD"  # 4 x (5 + 6 + 5) cents
    assert "USD" in page.inner_text("#available-balance")
    assert page.locator("#questions li").all_inner_texts() == list(QUESTIONS)
    preview_url = page.url
    token = page.input_value("#launch-form input[name=token]")
    csrf = page.input_value("#launch-form input[name=csrfmiddlewaretoken]")
    launch_url = live_server.url + page.get_attribute("#launch-form", "action")
    page.click("#launch-form input[type=submit]")
    page.wait_for_selector("#run-status")
    _shot(page, "operator-5-run-launched")
    run = Run.objects.get()
    page.evaluate("window.sameDocument = true")  # gone if the page reloaded
    worker = _drive_in_background(run.pk)
    # A function, not an expression: Playwright evals a bare expression in the page, which
    # the console's Content-Security-Policy forbids (no 'unsafe-eval', console/csp.py).
    page.wait_for_function(
        "() => document.querySelector('#run-status').dataset.finished === '1'", timeout=90_000
    )
    worker.join(timeout=60)
    _shot(page, "operator-6-run-finished")
    status = page.inner_text("#run-status")
    assert "12 of 12 samples terminal (100%)" in status
    assert "charged" in page.inner_text("#run-money") and "USD" in page.inner_text("#run-money")
    for platform in PLATFORMS:
        row = f"#run-platforms tr[data-platform={platform}]"
        assert page.inner_text(f"{row} td[data-count=pending]").strip() == "0"

    page.click("#report-link")
    frame = page.frame_locator("#report-frame")
    frame.locator("h1").wait_for()
    _shot(page, "operator-7-report")
    assert "Browser campaign" in frame.locator("header").inner_text()
    per_platform = frame.locator("section:has(h2:text-is('Per platform')) tbody tr")
    labels = per_platform.locator("td:nth-child(1)").all_inner_texts()
    assert labels[1:] == sorted(PLATFORMS), labels  # the overall row, then each platform
    overall_rate = per_platform.first.locator("td:nth-child(9)").inner_text()  # brand mention
    assert overall_rate.endswith("very low confidence)") and "(0/12" not in overall_rate
    assert "(12/12" not in overall_rate, overall_rate  # the brand is mentioned in some answers
    h2h = frame.locator("section:has(h2:has-text('Head-to-head')) tbody").inner_text()
    assert "Brightwave" in h2h and QUESTIONS[0] in h2h
    for fmt, suffix in (("csv", "-report.csv"), ("xlsx", "-report.xlsx")):
        with page.expect_download() as download:
            page.click(f"#report-downloads a[data-format={fmt}]")
        saved = ARTEFACTS / f"operator-report{suffix}"
        download.value.save_as(str(saved))
        assert download.value.suggested_filename.endswith(suffix)
    assert (ARTEFACTS / "operator-report-report.csv").read_bytes().startswith(b"\xef\xbb\xbf")
    assert (ARTEFACTS / "operator-report-report.xlsx").read_bytes()[:2] == b"PK"

    # The same preview confirmed a second time (Back, then Confirm): refused, no second run.
    again = page.request.post(
        launch_url,
        form={"token": token, "csrfmiddlewaretoken": csrf},
        headers={"Referer": preview_url},
    )
    assert again.ok and "no second run was launched" in again.text()
    assert Run.objects.count() == 1

    # A second run, launched and cancelled from its page before any worker takes it.
    page.goto(f"{live_server.url}/admin/sampling/campaign/{run.campaign_id}/change/")
    _preview_and_launch(page)
    second = Run.objects.exclude(pk=run.pk).get()
    page.click("#cancel-link")
    page.wait_for_selector("#cancel-confirm-form")
    _shot(page, "operator-8-cancel-confirmation")
    effects = page.inner_text(".geo-cancel-effects")
    assert "12 samples not yet submitted will not run" in effects
    assert "0.64 USD held for that work goes back to the tenant's balance" in effects
    page.click("#cancel-confirm")
    page.wait_for_selector(".messagelist .success")
    _shot(page, "operator-9-run-cancelled")
    assert page.locator("#run-cancelled").count() == 1
    assert Run.objects.get(pk=second.pk).cancelled_at is not None
    page.click("#report-link")
    frame = page.frame_locator("#report-frame")
    frame.locator("#run-cancelled").wait_for()
    assert frame.locator("#cancelled-count").inner_text() == "12"
    _shot(page, "operator-10-cancelled-run-report")


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


def test_platform_finance_imports_a_statement_reads_its_lines_and_voids_it(
    live_server: Any,
    browser: Any,
    simulator: Any,
    local_storage: Any,
) -> None:
    run = collected_run(COLLECTOR, questions=2, tenant="alpha")
    tasks = sorted(Sample.objects.filter(run=run).values_list("upstream_id", flat=True))
    grant_platform_finance(username="paula", password=PASSWORD)
    page = _page(browser, live_server, "paula")
    page.goto(f"{live_server.url}/admin/billing/upstreamstatement/")
    page.click("#import-link")
    page.select_option("#id_provider", "collector")
    rows = "".join(f"{task},0.45,USD,2026-11-11T02:00:00Z\n" for task in tasks)
    page.set_input_files(
        "#id_file",
        files=[{"name": "november.csv", "mimeType": "text/csv",
                "buffer": f"upstream_id,amount,currency,occurred_at\n{rows}".encode()}],
    )  # fmt: skip
    _shot(page, "platform-finance-1-import-form")
    page.click("#import-form input[type=submit]")
    page.wait_for_selector("#import-status")
    assert page.inner_text("#import-state") == "queued"
    assert run_queued_imports() == ["done"]  # the worker's part
    page.wait_for_selector("#import-statement", timeout=30_000)  # the page follows, reloads
    _shot(page, "platform-finance-2-import-done")
    assert page.inner_text("#import-rows-done") == str(len(tasks))

    page.click("#import-statement")
    page.wait_for_selector("#statement-status")
    _shot(page, "platform-finance-3-statement")
    lines = page.locator("#lines-group tbody tr:has(td.field-upstream_id)")
    assert sorted(lines.locator("td.field-upstream_id").all_inner_texts()) == tasks
    assert "0.45 USD" in lines.first.inner_text()
    assert " 45 USD" not in page.inner_text("#lines-group")  # no minor units on screen

    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    page.fill("#void-form textarea[name=reason]", "Wrong month: this is October's file.")
    page.click("#void-form input[type=submit]")
    page.wait_for_selector("#statement-voided")
    _shot(page, "platform-finance-4-voided")
    assert asked and asked[0].startswith("Void statement") and "stay on record" in asked[0]
    assert "voided: its 2 rows no longer count" in page.inner_text(".messagelist")
    assert "Wrong month" in page.inner_text("#statement-voided")
    assert page.locator("#void-form").count() == 0
    statement = UpstreamStatement.objects.get()
    assert StatementVoid.objects.filter(statement=statement).count() == 1
    assert UpstreamStatementLine.objects.filter(statement=statement).count() == len(tasks)
