"""The console's operations page: charts from the database as inline SVG, nothing fetched
from elsewhere, and only for superusers."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.db.models.functions import Now
from django.utils import timezone

from ops.charts import Window, evidence_missing
from sampling.models import Attempt, Sample
from tests.conftest import launch_funded, make_campaign_data

pytestmark = pytest.mark.django_db

TARGETS = [
    {"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"},
    {"platform": "collector", "device": "desktop", "region": "us", "mode": "web_search"},
]


@pytest.fixture
def activity() -> None:
    """A run with answers collected now: some with partial evidence, one rate-limited try,
    one sample parked."""
    data = make_campaign_data(questions=3, targets=TARGETS, repeats=1)
    run = launch_funded(data)
    samples = Sample.objects.filter(run=run).order_by("pk")
    samples.update(collection_state="completed", completed_at=Now(), evidence_state="stored")
    samples.filter(platform="collector").update(evidence_state="partial")
    first = samples.first()
    assert first is not None
    Attempt.objects.create(
        sample=first,
        attempt_no=1,
        idempotency_key="k1",
        fencing_token=1,
        error_class="rate_limited",
    )
    Sample.objects.filter(pk=samples.last().pk).update(queue_state="parked")  # type: ignore[union-attr]


def test_the_page_draws_the_last_hours_as_inline_svg(admin_client: Any, activity: None) -> None:
    response = admin_client.get("/admin/operations/?hours=6")
    assert response.status_code == 200
    html = response.content.decode()
    assert html.count('<svg xmlns="http://www.w3.org/2000/svg" role="img"') == 5  # 4 + attention
    for title in ("Queue wait", "Throughput", "Upstream errors by class", "Evidence missing"):
        assert title in html
    assert "<title>collector</title>" in html and "<title>rate_limited</title>" in html
    assert re.search(r">(openai|collector) parked</text>", html)
    # Nothing loaded from another origin: no script at all, no external src or stylesheet.
    assert "<script" not in html.split("</header>")[-1].split("<footer")[0]
    assert not re.search(r'(src|href)="(https?:)?//', html)


def test_the_evidence_missing_series_is_the_share_of_partial_answers(activity: None) -> None:
    end = timezone.now() + timedelta(minutes=1)
    series = evidence_missing(Window(start=end - timedelta(hours=1), end=end))
    assert max(series["collector"]) == 100.0 and max(series["openai"]) == 0.0


def test_only_superusers_see_it(client: Any, django_user_model: Any) -> None:
    staff = django_user_model.objects.create_user("op", password="pw", is_staff=True)
    client.force_login(staff)
    assert client.get("/admin/operations/").status_code == 403


def test_the_console_home_links_superusers_to_it(admin_client: Any) -> None:
    page = admin_client.get("/admin/").content.decode()
    assert 'href="/admin/operations/"' in page


def test_the_console_home_hides_the_link_from_staff(client: Any, django_user_model: Any) -> None:
    staff = django_user_model.objects.create_user("op", password="pw", is_staff=True)
    client.force_login(staff)
    page = client.get("/admin/").content.decode()
    assert client.get("/admin/").status_code == 200
    assert "/admin/operations/" not in page


@pytest.mark.parametrize("hours", ["abc", "1e3", "9" * 5000, "%00"])
def test_hours_that_are_not_a_number_are_a_400(admin_client: Any, hours: str) -> None:
    response = admin_client.get(f"/admin/operations/?hours={hours}")
    assert response.status_code == 400
