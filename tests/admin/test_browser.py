"""One real-browser check of the console: Debian's chromium driven by Playwright, loopback only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pipeline.launch import launch_run
from sampling.models import Run, Sample
from tests.admin.conftest import SUCCEEDED, make_campaign
from tests.chromium import chromium, log_in, needs_browser

pytestmark = needs_browser


@pytest.mark.django_db(transaction=True)
def test_operator_logs_in_and_sees_the_run_status(
    live_server: Any, django_user_model: Any, tmp_path: Path
) -> None:
    # All database work happens before Playwright starts its event loop in this thread.
    django_user_model.objects.create_superuser("operator", "ops@example.com", "correct horse")
    run: Run = launch_run(campaign=make_campaign())
    first = Sample.objects.filter(run=run).order_by("id").first()
    assert first is not None
    Sample.objects.filter(pk=first.pk).update(**SUCCEEDED)
    run_url = f"{live_server.url}/admin/sampling/run/{run.pk}/change/"
    shot = tmp_path / "run.png"

    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        # The root sends an operator to the admin login.
        log_in(page, f"{live_server.url}/", "operator", "correct horse")
        page.goto(run_url)
        badge = page.locator("#run-status .geo-badge")
        badge.wait_for(state="visible")
        status_text = page.locator("#run-status .geo-status-text").inner_text()
        badge_text = badge.inner_text()
        page.screenshot(path=str(shot), full_page=True)

    assert badge_text == "In progress"
    assert status_text == "1 of 4 samples terminal (25%)"
    data = shot.read_bytes()
    assert len(data) > 1000
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
