"""The campaign dashboard (CampaignAdmin's dashboard page, console/dashboard.py): who opens it,
what its charts show from the series rows, the filters in the URL, the links to samples, and
segment breaks that no line crosses."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from monitoring.models import SeriesRow
from sampling.models import Campaign, Competitor, Run
from tests.console.series_rows import daily_runs, write_rows
from tests.world import TenantWorld

pytestmark = pytest.mark.django_db

SVG = "{http://www.w3.org/2000/svg}"
RIVAL = "Rivalco"


@dataclass
class Monitored:
    campaign: Campaign
    runs: list[Run]
    url: str


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def monitored(two_tenants: tuple[TenantWorld, TenantWorld]) -> Monitored:
    """Six daily runs of tenant A's campaign on two platforms, a break after the third (the
    comparability key changes), the brand mentioned in 10 of 20 valid answers, a rival in 5."""
    alpha, _ = two_tenants
    campaign = Campaign.objects.select_related("brand").get(tenant=alpha.tenant)
    Competitor.objects.create(campaign=campaign, position=0, name=RIVAL, aliases=[], domains=[])
    SeriesRow.objects.filter(campaign=campaign).delete()  # the world's own run: not these
    runs = daily_runs(campaign, timezone.now() - timedelta(days=8), 6)
    write_rows(
        campaign,
        runs,
        platforms=("collector", "openai"),
        entities=(campaign.brand.name, RIVAL),
        keys=["k1"] * 3 + ["k2"] * 3,
        mentioned={campaign.brand.name: 10, RIVAL: 5},
    )
    url = reverse("admin:sampling_campaign_dashboard", args=[campaign.pk])
    return Monitored(campaign, runs, url)


def _svgs(page: str) -> list[ET.Element]:
    return [
        ET.fromstring(svg)  # noqa: S314  (our own output)
        for svg in re.findall(r"<svg class=\"geo-chart\".*?</svg>", page, re.S)
    ]


def _platform_chart(page: str, platform: str) -> ET.Element:
    box = re.search(rf'data-platform="{platform}".*?(<svg .*?</svg>)', page, re.S)
    assert box is not None, platform
    return ET.fromstring(box.group(1))  # noqa: S314


def _lines(svg: ET.Element) -> list[ET.Element]:
    return [e for e in svg.iter(f"{SVG}polyline") if e.get("class") == "geo-line"]


@pytest.mark.parametrize("role", ["operator", "analyst"])
def test_operators_and_analysts_see_visibility_per_platform_with_its_band(
    two_tenants: tuple[TenantWorld, TenantWorld], monitored: Monitored, role: str
) -> None:
    alpha, _ = two_tenants
    response = _client(alpha.users[role]).get(monitored.url)
    assert response.status_code == 200
    page = response.content.decode()
    for platform in ("collector", "openai"):
        chart = _platform_chart(page, platform)
        assert [e for e in chart.iter(f"{SVG}polygon") if e.get("class") == "geo-band"]
        tips = [t.text or "" for t in chart.iter(f"{SVG}title")]
        assert any("visibility 50.0 % (10 of 20)" in tip for tip in tips)
    assert 'id="runs-in-range">6<' in page
    for section in ("share-of-voice", "average-position", "own-citations", "sentiment"):
        assert f'id="{section}"' in page
    # the brand's share of voice over the latest segment: 3 runs x 2 platforms x 10 of (10 + 5)
    assert "66.7 % (60 of 90 mentions)" in page


def test_every_point_links_to_the_valid_samples_of_its_run_and_platform(
    two_tenants: tuple[TenantWorld, TenantWorld], monitored: Monitored
) -> None:
    alpha, _ = two_tenants
    page = _client(alpha.users["analyst"]).get(monitored.url).content.decode()
    chart = _platform_chart(page, "openai")
    hrefs = [a.get("href") or "" for a in chart.iter(f"{SVG}a")]
    assert len(hrefs) == len(monitored.runs)
    samples = reverse("admin:sampling_sample_changelist")
    for run in monitored.runs:
        assert f"{samples}?run={run.pk}&platform=openai&validity=valid" in hrefs
    # and the sample list accepts those filters (no "?e=1" redirect of unknown lookups)
    listed = _client(alpha.users["analyst"]).get(hrefs[0])
    assert listed.status_code == 200


def test_a_break_in_what_is_measured_starts_a_segment_no_line_crosses(
    two_tenants: tuple[TenantWorld, TenantWorld], monitored: Monitored
) -> None:
    alpha, _ = two_tenants
    page = _client(alpha.users["operator"]).get(monitored.url).content.decode()
    for platform in ("collector", "openai"):
        chart = _platform_chart(page, platform)
        assert [len((e.get("points") or "").split()) for e in _lines(chart)] == [3, 3]
        assert len([g for g in chart.iter(f"{SVG}g") if g.get("class") == "geo-break"]) == 1
    assert page.count('class="geo-segment"') == 2
    # the summaries cover the latest segment only
    assert "3 runs since" in page


def test_the_filters_stay_in_the_url_and_narrow_the_charts(
    two_tenants: tuple[TenantWorld, TenantWorld], monitored: Monitored
) -> None:
    alpha, _ = two_tenants
    since = (timezone.now() - timedelta(days=6)).date().isoformat()
    response = _client(alpha.users["operator"]).get(
        monitored.url, {"platform": "collector", "since": since}
    )
    page = response.content.decode()
    assert 'data-platform="collector"' in page and 'data-platform="openai"' not in page
    assert re.search(r'<option value="collector" selected>', page)
    assert f'value="{since}"' in page
    assert 'id="runs-in-range">4<' in page  # the first two days are before `since`
    assert re.search(r'<form method="get" id="dashboard-filters"', page)


def test_an_unknown_filter_value_falls_back_to_the_default_view(
    two_tenants: tuple[TenantWorld, TenantWorld], monitored: Monitored
) -> None:
    alpha, _ = two_tenants
    response = _client(alpha.users["operator"]).get(
        monitored.url, {"since": "2026-12-31", "until": "2026-01-01"}
    )
    assert response.status_code == 200
    assert "Some filters were not valid" in response.content.decode()


def test_finance_gets_no_dashboard_and_no_link_to_it(
    two_tenants: tuple[TenantWorld, TenantWorld], monitored: Monitored
) -> None:
    alpha, _ = two_tenants
    finance = _client(alpha.users["finance"])
    assert finance.get(monitored.url).status_code == 403
    run_page = finance.get(reverse("admin:sampling_run_change", args=[alpha.run.pk]))
    assert run_page.status_code == 200
    assert 'id="dashboard-link"' not in run_page.content.decode()


def test_another_tenants_campaign_dashboard_is_a_404(
    two_tenants: tuple[TenantWorld, TenantWorld], monitored: Monitored
) -> None:
    _, bravo = two_tenants
    for role in ("operator", "analyst", "finance"):
        assert _client(bravo.users[role]).get(monitored.url).status_code == 404, role
    missing = reverse("admin:sampling_campaign_dashboard", args=[10**9])
    assert _client(bravo.users["operator"]).get(missing).status_code == 404


def test_the_campaign_page_and_the_run_page_link_to_the_dashboard(
    two_tenants: tuple[TenantWorld, TenantWorld], monitored: Monitored
) -> None:
    alpha, _ = two_tenants
    operator = _client(alpha.users["operator"])
    campaign_page = operator.get(
        reverse("admin:sampling_campaign_change", args=[monitored.campaign.pk])
    ).content.decode()
    assert f'href="{monitored.url}" id="dashboard-link"' in campaign_page
    analyst = _client(alpha.users["analyst"])
    run_page = analyst.get(reverse("admin:sampling_run_change", args=[alpha.run.pk]))
    assert f'href="{monitored.url}" id="dashboard-link"' in run_page.content.decode()


def test_a_campaign_without_series_rows_says_so(
    two_tenants: tuple[TenantWorld, TenantWorld],
) -> None:
    alpha, _ = two_tenants
    campaign = Campaign.objects.get(tenant=alpha.tenant)
    SeriesRow.objects.filter(campaign=campaign).delete()
    url = reverse("admin:sampling_campaign_dashboard", args=[campaign.pk])
    page = _client(alpha.users["analyst"]).get(url).content.decode()
    assert 'id="no-series"' in page
    assert all(svg.tag == f"{SVG}svg" for svg in _svgs(page))


def test_a_topic_narrows_the_charts_to_its_rows(
    two_tenants: tuple[TenantWorld, TenantWorld], monitored: Monitored
) -> None:
    alpha, _ = two_tenants
    campaign = monitored.campaign
    question = campaign.questions.order_by("position").first()
    assert question is not None
    question.topics = ["pricing"]
    question.save(update_fields=["topics"])
    write_rows(
        campaign,
        monitored.runs,
        platforms=("collector",),
        entities=(campaign.brand.name, RIVAL),
        keys=["t1"] * len(monitored.runs),
        mentioned={campaign.brand.name: 3, RIVAL: 1},
        topic="pricing",
    )
    client = _client(alpha.users["analyst"])
    page = client.get(monitored.url).content.decode()
    assert '<option value="pricing">pricing</option>' in page
    page = client.get(monitored.url, {"topic": "pricing"}).content.decode()
    assert 'data-platform="collector"' in page and 'data-platform="openai"' not in page
    tips = [t.text or "" for t in _platform_chart(page, "collector").iter(f"{SVG}title")]
    assert sum("visibility 15.0 % (3 of 20)" in tip for tip in tips) == len(monitored.runs)


def test_top_cited_domains_count_only_what_the_answers_cite(
    two_tenants: tuple[TenantWorld, TenantWorld],
) -> None:
    from console.dashboard import Filters, top_domains
    from evidence.models import Citation, CitationRole

    alpha, _ = two_tenants
    cited = Citation.objects.filter(run=alpha.run, role=CitationRole.CITED).exclude(domain="")
    first = cited.first()
    assert first is not None
    for position in range(5):  # more often found than any domain is cited: ranked first if counted
        Citation.objects.create(
            capture=first.capture, position=900 + position, url="https://found-only.example/a",
            normalized_url="https://found-only.example/a", domain="found-only.example",
            role=CitationRole.FOUND, run=alpha.run, sample=first.sample, platform=first.platform,
            question_revision=first.question_revision,
        )  # fmt: skip
    today = timezone.now().date()

    chart = str(top_domains(alpha.run.campaign, Filters(since=today, until=today), [alpha.run.pk]))

    assert first.domain in chart
    assert "found-only.example" not in chart


def test_the_topic_filter_offers_the_topics_in_alphabetical_order(
    two_tenants: tuple[TenantWorld, TenantWorld], monitored: Monitored
) -> None:
    # A set's order changes from one process to the next (string hashing is salted): the
    # options must not, or the same link shows another list to the next person.
    alpha, _ = two_tenants
    topics = ["zeta", "alpha", "mu", "beta", "omega", "kappa"]
    for question, topic in zip(
        monitored.campaign.questions.order_by("position"), topics, strict=False
    ):
        question.topics = [topic]
        question.save(update_fields=["topics"])
    page = _client(alpha.users["analyst"]).get(monitored.url).content.decode()
    select = re.search(r'<select name="topic".*?</select>', page, re.S)
    assert select is not None
    offered = re.findall(r'<option value="([^"]+)"', select.group(0))
    used = topics[: monitored.campaign.questions.count()]
    assert len(used) >= 2 and offered == sorted(used)


def test_the_question_filter_marks_the_chosen_question_and_escapes_its_text() -> None:
    from console.dashboard import PlainSelect

    widget = PlainSelect(choices=[("", "all"), ("7", '1. <b>"Which" CRM?</b>'), ("8", "2. x")])
    html = widget.render("question", 7, attrs={"id": "id_question"})
    assert html.startswith('<select name="question" id="id_question">')
    text = "1. &lt;b&gt;&quot;Which&quot; CRM?&lt;/b&gt;"
    assert f'<option value="7" selected>{text}</option>' in html
    assert '<option value="" >' not in html and '<option value="">all</option>' in html
    assert html.count(" selected") == 1
