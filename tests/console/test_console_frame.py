"""The console's frame as each person reads it (issue 29, finding 10): their role's header and
home page, error pages inside the console with a way back, a favicon, counts in proper
plurals, breadcrumbs with every level, choosers instead of pasted ids, and the home page
without the tables only a superuser debugs with."""

from __future__ import annotations

import copy
import re
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.template.loader import render_to_string
from django.test import Client
from django.urls import reverse

from pipeline.launch import launch_run
from sampling.models import Run, Sample
from tenancy.models import Tenant
from tenancy.services import grant_role
from tests.admin.conftest import make_campaign
from tests.conftest import BASE_CAMPAIGN

pytestmark = pytest.mark.django_db

HEADER = re.compile(r'<div id="site-name"><a href="/admin/">([^<]+)</a></div>')


@pytest.fixture
def run() -> Run:
    return launch_run(campaign=make_campaign())


def _client(tenant: Tenant, role: str) -> Client:
    username = f"{tenant.slug}-{role}"
    grant_role(username=username, tenant=tenant, role=role)
    client = Client()
    client.force_login(get_user_model().objects.get(username=username))
    return client


def _header(page: str) -> str:
    match = HEADER.search(page)
    assert match, "no console header"
    return match.group(1)


@pytest.mark.parametrize(
    ("role", "header", "home"),
    [
        ("operator", "GEO operator console", "Campaigns, runs and evidence"),
        ("analyst", "GEO analyst console", "Runs, evidence and the review queue"),
        ("finance", "GEO finance console", "Accounts, the ledger and reconciliation"),
    ],
)
def test_each_role_reads_its_own_header_and_home_title(
    run: Run, role: str, header: str, home: str
) -> None:
    page = _client(run.tenant, role).get(reverse("admin:index")).content.decode()

    assert _header(page) == header
    assert f'<h1 id="home-title">{home}</h1>' in page
    if role == "finance":
        assert "Campaigns, runs and evidence" not in page


def test_a_missing_page_is_a_console_page_with_a_way_back(run: Run) -> None:
    client = _client(run.tenant, "operator")

    response = client.get(reverse("admin:sampling_run_change", args=[uuid.uuid4()]))

    page = response.content.decode()
    assert response.status_code == 404
    assert _header(page) == "GEO operator console"
    assert "<h1>Not found (404)</h1>" in page
    assert 'href="/admin/" class="button" id="error-home"' in page


def test_a_refused_page_is_a_console_page_with_a_way_back(run: Run) -> None:
    client = _client(run.tenant, "analyst")

    response = client.get(reverse("admin:billing_reconciliation"))

    page = response.content.decode()
    assert response.status_code == 403
    assert _header(page) == "GEO analyst console"
    assert "<h1>Not allowed (403)</h1>" in page and 'id="error-home"' in page


def test_the_server_error_page_needs_no_request_and_leads_home() -> None:
    page = render_to_string("500.html")

    assert "Something went wrong (500)" in page
    assert 'href="/admin/" class="button" id="error-home"' in page


def test_every_console_page_names_a_favicon_that_is_served(admin_client: Client) -> None:
    page = admin_client.get(reverse("admin:index")).content.decode()
    href = re.search(r'<link rel="icon" type="image/svg\+xml" href="([^"]+)"', page)
    assert href, "no favicon link"

    icon = admin_client.get(href.group(1))
    assert icon.status_code == 200
    assert b"<svg" in b"".join(icon.streaming_content)  # type: ignore[attr-defined]
    fallback = admin_client.get("/favicon.ico")
    assert fallback.status_code == 302 and fallback["Location"] == href.group(1)


def test_counts_read_as_proper_plurals(admin_client: Client, run: Run) -> None:
    campaigns = admin_client.get(reverse("admin:sampling_campaign_changelist")).content.decode()
    assert ">1 run</a>" in campaigns and "1 runs" not in campaigns

    ids = list(Sample.objects.filter(run=run).values_list("id", flat=True))
    Sample.objects.filter(id__in=ids[:1]).update(evidence_state="partial", queue_state="done")
    one = admin_client.get(reverse("admin:evidence_reviewsample_changelist")).content.decode()
    Sample.objects.filter(id__in=ids).update(evidence_state="partial", queue_state="done")
    many = admin_client.get(reverse("admin:evidence_reviewsample_changelist")).content.decode()

    assert '<span id="result-count">1 sample in the review queue</span>' in one
    assert '<span id="result-count">4 samples in the review queue</span>' in many


def test_breadcrumbs_of_the_consoles_own_pages_name_every_level(
    admin_client: Client, run: Run
) -> None:
    app = reverse("admin:app_list", args=["sampling"])
    runs = reverse("admin:sampling_run_changelist")
    this_run = reverse("admin:sampling_run_change", args=[run.pk])
    for url in (
        reverse("admin:sampling_run_report", args=[run.pk]),
        reverse("admin:sampling_run_cancel", args=[run.pk]),
    ):
        crumbs = admin_client.get(url).content.decode().split('<div class="breadcrumbs">')[1]
        crumbs = crumbs.split("</div>")[0]
        assert [app, runs, this_run] == re.findall(r'href="([^"]+)"', crumbs)[1:], url
    preview = admin_client.get(reverse("admin:sampling_campaign_preview", args=[run.campaign_id]))
    assert f'href="{app}"' in preview.content.decode().split('<div class="breadcrumbs">')[1]
    recon = admin_client.get(reverse("admin:billing_reconciliation")).content.decode()
    assert f'href="{reverse("admin:app_list", args=["billing"])}"' in recon


def test_reconciliation_chooses_from_the_readers_runs_and_platforms(run: Run) -> None:
    other = launch_run(
        campaign=make_campaign(
            {**copy.deepcopy(BASE_CAMPAIGN), "tenant": "other", "name": "Theirs"}
        )
    )
    client = _client(run.tenant, "finance")

    page = client.get(reverse("admin:billing_reconciliation")).content.decode()

    runs = re.findall(r'<option value="([0-9a-f-]{36})"', page)
    assert runs == [str(run.pk)] and str(other.pk) not in page
    assert '<select name="platform" id="recon-platform">' in page
    assert '<option value="openai">openai</option>' in page
    assert 'name="run" value=' not in page  # no box to paste a UUID into


def test_the_home_page_lists_internal_tables_for_superusers_only(
    admin_client: Client, run: Run
) -> None:
    stale = reverse("admin:sampling_stalewrite_changelist")
    operator = _client(run.tenant, "operator")

    assert f'href="{stale}"' not in operator.get(reverse("admin:index")).content.decode()
    assert "Stale writes" not in operator.get(reverse("admin:index")).content.decode()
    assert f'href="{stale}"' in admin_client.get(reverse("admin:index")).content.decode()
    assert operator.get(stale).status_code == 200  # still reachable from the rows linking it
