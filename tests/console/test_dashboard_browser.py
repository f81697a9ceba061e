"""The campaign dashboard walked in real Chromium (tests/chromium.py) as an operator and an
analyst of the tenant, on a laptop-sized window: the charts, a filter kept in the URL, a point
followed to its samples and on to a sample's evidence; another tenant's campaign is a 404 and
finance gets none. Screenshots go to var/artefacts/browser/ (dashboard-*.png)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone

from monitoring.models import SeriesRow
from sampling.models import Campaign, Competitor, Run
from tenancy.models import Tenant
from tenancy.services import grant_role
from tests.chromium import chromium, log_in, needs_browser
from tests.console.series_rows import daily_runs, write_rows
from tests.evidence.helpers import COLLECTOR, OPENAI, collected_run
from tests.world import PASSWORD

ARTEFACTS = Path(settings.BASE_DIR) / "var" / "artefacts" / "browser"
LAPTOP = {"width": 1366, "height": 768}
RIVAL = "Rivalco"

pytestmark = [*needs_browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def browser(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    with chromium() as browser:
        yield browser


def _page(browser: Any, live_server: Any, username: str) -> Any:
    page = browser.new_page(viewport=LAPTOP)
    log_in(page, f"{live_server.url}/admin/login/", username, PASSWORD)
    page.wait_for_selector("#site-name")
    return page


def _shot(page: Any, name: str) -> None:
    path = ARTEFACTS / f"dashboard-{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.read_bytes().startswith(b"\x89PNG")


def _no_sideways_scroll(page: Any) -> None:
    assert page.evaluate(
        "() => document.documentElement.scrollWidth <= document.documentElement.clientWidth"
    )


def _history(run: Run) -> Campaign:
    """Twenty days of series before the collected run, a break ten days ago (the key changes),
    and the collected run's own rows last: its points link to samples that exist."""
    campaign = Campaign.objects.select_related("brand").get(pk=run.campaign_id)
    Competitor.objects.create(campaign=campaign, position=0, name=RIVAL, aliases=[], domains=[])
    SeriesRow.objects.filter(campaign=campaign).delete()
    history = daily_runs(campaign, timezone.now() - timedelta(days=21), 20)
    Run.objects.filter(pk=run.pk).update(finished_at=timezone.now() - timedelta(hours=1))
    run.refresh_from_db()
    entities = (campaign.brand.name, RIVAL)
    for index, past in enumerate(history):
        write_rows(
            campaign,
            [past],
            platforms=("collector", "openai"),
            entities=entities,
            keys=["k1" if index < 10 else "k2"],
            mentioned={campaign.brand.name: 8 + index % 5, RIVAL: 6 - index % 3},
        )
    write_rows(
        campaign,
        [run],
        platforms=("collector", "openai"),
        entities=entities,
        keys=["k2"],
        valid=2,
        mentioned={campaign.brand.name: 1, RIVAL: 1},
    )
    return campaign


def test_operator_and_analyst_walk_the_dashboard_to_the_evidence_others_get_none(
    live_server: Any, browser: Any, simulator: Any, local_storage: Any
) -> None:
    run = collected_run([*COLLECTOR, *OPENAI], questions=2, tenant="alpha", name="Watched")
    collected_run(COLLECTOR, questions=1, tenant="zzbravo", name="Other tenant's")
    campaign = _history(run)
    alpha, bravo = Tenant.objects.get(slug="alpha"), Tenant.objects.get(slug="zzbravo")
    for username, tenant, role in (
        ("olga", alpha, "operator"),
        ("anna", alpha, "analyst"),
        ("fiona", alpha, "finance"),
        ("boris", bravo, "operator"),
    ):
        grant_role(username=username, tenant=tenant, role=role, password=PASSWORD)
    dashboard = f"{live_server.url}/admin/sampling/campaign/{campaign.pk}/dashboard/"

    # The operator: from the campaign page to the dashboard.
    page = _page(browser, live_server, "olga")
    page.goto(f"{live_server.url}/admin/sampling/campaign/{campaign.pk}/change/")
    page.click("#dashboard-link")
    page.wait_for_selector("#visibility")
    assert page.url.startswith(dashboard)
    _no_sideways_scroll(page)
    _shot(page, "operator-1-overview")
    assert page.locator("#visibility .geo-chart-box").count() == 2
    assert page.locator("#visibility .geo-break").count() == 2  # one per platform chart
    assert page.locator("#dashboard-segments .geo-segment").count() == 2
    assert page.inner_text("#runs-in-range") == "21"

    # A filter, kept in the URL: the shared link opens the same view.
    page.select_option("#id_platform", "openai")
    page.click("#dashboard-filters input[type=submit]")
    page.wait_for_selector("#visibility")
    assert "platform=openai" in page.url
    assert page.locator("#visibility .geo-chart-box").count() == 1
    _no_sideways_scroll(page)
    _shot(page, "operator-2-filtered-openai")
    shared = page.url

    # The latest point of the chart: the collected run's samples on that platform.
    point = page.locator("#visibility svg a").last
    href = point.get_attribute("href")
    assert href is not None and f"run={run.pk}" in href and "platform=openai" in href
    point.click()
    page.wait_for_selector("#result_list")
    _shot(page, "operator-3-point-samples")
    assert page.locator("#result_list tbody tr").count() >= 1  # its valid answers on openai
    page.click("#result_list tbody tr:first-child th a")
    page.wait_for_selector(".field-run_link")
    _shot(page, "operator-4-sample-evidence")
    assert page.locator("#captures-group").count() == 1
    page.close()

    # The analyst: from the run page (no campaign page for this role), the shared link too.
    page = _page(browser, live_server, "anna")
    page.goto(f"{live_server.url}/admin/sampling/run/{run.pk}/change/")
    page.click("#dashboard-link")
    page.wait_for_selector("#visibility")
    _no_sideways_scroll(page)
    _shot(page, "analyst-1-overview")
    page.goto(shared)
    page.wait_for_selector("#visibility")
    assert page.locator("#visibility .geo-chart-box").count() == 1
    assert page.input_value("#id_platform") == "openai"
    _shot(page, "analyst-2-shared-link")
    page.close()

    # Finance: no link on the run page, and the dashboard is refused.
    page = _page(browser, live_server, "fiona")
    page.goto(f"{live_server.url}/admin/sampling/run/{run.pk}/change/")
    assert page.locator("#dashboard-link").count() == 0
    response = page.goto(dashboard)
    assert response is not None and response.status == 403
    _shot(page, "finance-refused")
    page.close()

    # Another tenant's operator: the campaign does not exist for them.
    page = _page(browser, live_server, "boris")
    response = page.goto(dashboard)
    assert response is not None and response.status == 404
    _shot(page, "other-tenant-404")
    page.close()
