"""One real-browser check of the console: Debian's chromium driven by Playwright, loopback only."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from sampling.models import Run, Sample
from tests.admin.conftest import make_campaign

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = [
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"
    ),
    pytest.mark.skipif(
        importlib.util.find_spec("playwright") is None,
        reason="needs the playwright package (pip install playwright; no browser download)",
    ),
]


@pytest.mark.django_db(transaction=True)
def test_operator_logs_in_and_sees_the_run_status(
    live_server: Any, django_user_model: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    from pipeline.launch import launch_run

    # All database work happens before Playwright starts its event loop in this thread.
    django_user_model.objects.create_superuser("operator", "ops@example.com", "correct horse")
    run: Run = launch_run(campaign=make_campaign())
    first = Sample.objects.filter(run=run).order_by("id").first()
    assert first is not None
    Sample.objects.filter(pk=first.pk).update(
        submission_state="accepted",
        collection_state="completed",
        evidence_state="stored",
        analysis_state="accepted",
        validity="valid",
        queue_state="done",
        step="none",
    )
    run_url = f"{live_server.url}/admin/sampling/run/{run.pk}/change/"
    shot = tmp_path / "run.png"

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{live_server.url}/")  # the root sends an operator to the admin login
            page.fill("#id_username", "operator")
            page.fill("#id_password", "correct horse")
            page.click("input[type=submit]")
            page.goto(run_url)
            badge = page.locator("#run-status .geo-badge")
            badge.wait_for(state="visible")
            status_text = page.locator("#run-status .geo-status-text").inner_text()
            badge_text = badge.inner_text()
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()

    assert badge_text == "In progress"
    assert status_text == "1 of 4 samples terminal (25%)"
    data = shot.read_bytes()
    assert len(data) > 1000
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
