"""The isolation walk: every registered admin URL (changelists, searches, the change page of
every object) and every custom view, as each role of tenant A. Nothing of tenant B appears;
B's objects are 404; each role opens only its pages."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib import admin
from django.db.models import Model
from django.test import Client
from django.urls import reverse

from billing.models import JournalEntry
from evidence.models import EvidenceObject
from sampling.models import Campaign, Sample
from tenancy.roles import ROLE_PERMISSIONS
from tenancy.scope import GLOBAL, TENANT_PATHS, model_label, permission, tenant_filter
from tests.world import TenantWorld

pytestmark = pytest.mark.django_db

ROLES = ("operator", "analyst", "finance")
REPORT_FORMATS = ("csv", "json", "xlsx", "html")


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _registered() -> Iterator[tuple[type[Model], Any]]:
    yield from admin.site._registry.items()


def _owner(obj: Model, alpha: TenantWorld, bravo: TenantWorld) -> str:
    """ "alpha", "bravo" or "platform" (rows with no tenant)."""
    model = type(obj)
    if TENANT_PATHS.get(model_label(model)) == GLOBAL:
        return "platform"
    for world, name in ((alpha, "alpha"), (bravo, "bravo")):
        condition = tenant_filter(model, {world.tenant.pk})
        if condition is not None and model._default_manager.filter(condition, pk=obj.pk).exists():
            return name
    return "platform"


def _change_url(obj: Model) -> str:
    opts = obj._meta
    return reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])


def _bravo_fingerprints(alpha: TenantWorld, bravo: TenantWorld) -> list[str]:
    """Strings that only tenant B's rows produce: its marker, its run id, its rows' URLs."""
    prints = [bravo.marker.lower(), bravo.tenant.slug, str(bravo.run.pk)]
    for model, _ in _registered():
        for obj in model._default_manager.all():
            if _owner(obj, alpha, bravo) == "bravo":
                prints.append(_change_url(obj))
    return prints


def _assert_clean(page: str, prints: list[str], where: str) -> None:
    lowered = page.lower()
    leaked = [p for p in prints if p.lower() in lowered]
    assert not leaked, f"{where} shows tenant B: {leaked[:5]}"


def test_each_role_of_tenant_a_sees_only_its_pages_and_nothing_of_tenant_b(
    two_tenants: tuple[TenantWorld, TenantWorld],
) -> None:
    alpha, bravo = two_tenants
    prints = _bravo_fingerprints(alpha, bravo)
    objects = [(model, obj) for model, _ in _registered() for obj in model._default_manager.all()]
    assert {_owner(o, alpha, bravo) for _, o in objects} >= {"alpha", "bravo", "platform"}
    for role in ROLES:
        client = _client(alpha.users[role])
        granted = ROLE_PERMISSIONS[role]
        seen_alpha = 0
        index = client.get(reverse("admin:index"))
        assert index.status_code == 200
        _assert_clean(index.content.decode(), prints, f"{role}: index")
        for model, model_admin in _registered():
            allowed = permission(model) in granted
            url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
            for query in ("", f"?q={bravo.marker}", f"?q={bravo.tenant.slug}"):
                if query and not model_admin.search_fields:
                    continue
                response = client.get(url + query)
                assert response.status_code == (200 if allowed else 403), (role, url + query)
                if response.status_code != 200:
                    continue
                where = f"{role}: {url}{query}"
                if query:  # the search box echoes the term: count the results instead
                    assert response.context["cl"].result_count == 0, where
                    _assert_clean(response.content.decode(), prints[3:], where)
                else:
                    _assert_clean(response.content.decode(), prints, where)
            link = f'href="{url}"'
            listed = allowed and not getattr(model_admin, "internal_table", False)
            assert (link in index.content.decode()) == listed, (role, "index link", url)
        for model, obj in objects:
            owner = _owner(obj, alpha, bravo)
            url = _change_url(obj)
            response = client.get(url)
            if owner == "bravo":
                assert response.status_code == 404, (role, url)
                continue
            assert response.status_code in (200, 403, 404), (role, url)
            if permission(model) not in granted:
                assert response.status_code != 200, (role, url)
            if response.status_code == 200:
                seen_alpha += owner == "alpha"
                _assert_clean(response.content.decode(), prints, f"{role}: {url}")
        assert seen_alpha > 0, f"{role} could open none of tenant A's rows"


def test_a_tenant_a_user_gets_404_for_tenant_b_in_every_custom_view(
    two_tenants: tuple[TenantWorld, TenantWorld],
) -> None:
    alpha, bravo = two_tenants
    b_campaign = Campaign.objects.get(tenant=bravo.tenant)
    b_sample = Sample.objects.filter(run=bravo.run).order_by("id").first()
    assert b_sample is not None
    b_objects = EvidenceObject.objects.filter(capture__sample__run=bravo.run)
    assert b_objects.exists()
    run = bravo.run.pk
    gets = [
        reverse("admin:sampling_campaign_preview", args=[b_campaign.pk]),
        reverse("admin:sampling_campaign_dashboard", args=[b_campaign.pk]),
        reverse("admin:sampling_run_progress", args=[run]),
        reverse("admin:sampling_run_report", args=[run]),
        *(reverse("admin:sampling_run_report_download", args=[run, f]) for f in REPORT_FORMATS),
        reverse("admin:evidence_reviewsample_change", args=[b_sample.pk]),
        reverse("admin:billing_reconciliation") + f"?run={run}",
        reverse("admin:billing_reconciliation") + f"?run={run}&format=csv",
        *(reverse("evidence:download", args=[o.pk]) for o in b_objects),
        *(reverse("evidence:download_by_key", args=[o.key]) for o in b_objects),
    ]  # fmt: skip
    posts = [
        reverse("admin:sampling_campaign_launch", args=[b_campaign.pk]),
        reverse("admin:sampling_run_cancel", args=[run]),
        reverse("admin:evidence_reviewsample_decide", args=[b_sample.pk]),
    ]
    entries = JournalEntry.objects.count()
    for role in ROLES:
        client = _client(alpha.users[role])
        for url in gets:
            assert client.get(url).status_code == 404, (role, url)
        for url in posts:
            assert client.post(url, {"token": "x", "decision": "accepted"}).status_code == 404
    assert JournalEntry.objects.count() == entries
    bravo.run.refresh_from_db()
    assert bravo.run.cancelled_at is None


def test_finance_cannot_top_up_another_tenant_and_sees_only_its_own_reconciliation(
    two_tenants: tuple[TenantWorld, TenantWorld],
) -> None:
    alpha, bravo = two_tenants
    client = _client(alpha.users["finance"])
    form = client.get(reverse("admin:billing_top_up")).content.decode()
    assert alpha.tenant.slug in form and bravo.tenant.slug not in form
    entries = JournalEntry.objects.count()
    response = client.post(
        reverse("admin:billing_top_up"),
        {"tenant": bravo.tenant.pk, "amount": "10.00", "currency": "USD", "key": "k"},
    )
    assert response.status_code == 200 and "Select a valid choice" in response.content.decode()
    assert JournalEntry.objects.count() == entries
    report = client.get(reverse("admin:billing_reconciliation") + "?start=2026-01-01")
    page = report.content.decode()
    assert str(alpha.run.pk) in page and str(bravo.run.pk) not in page


def test_roles_outside_their_pages_get_403_or_404_never_the_content(
    two_tenants: tuple[TenantWorld, TenantWorld],
) -> None:
    alpha, _ = two_tenants
    sample = Sample.objects.filter(run=alpha.run).order_by("id").first()
    assert sample is not None
    finance = _client(alpha.users["finance"])
    evidence = EvidenceObject.objects.filter(capture__sample=sample)
    for url in (
        reverse("admin:sampling_sample_change", args=[sample.pk]),
        reverse("admin:sampling_run_report", args=[alpha.run.pk]),
        *(reverse("evidence:download", args=[o.pk]) for o in evidence),
    ):
        assert finance.get(url).status_code in (403, 404), url
    analyst = _client(alpha.users["analyst"])
    assert analyst.get(reverse("admin:billing_reconciliation")).status_code == 403
    assert analyst.get(reverse("admin:billing_top_up")).status_code == 403
    operator = _client(alpha.users["operator"])
    assert operator.get(reverse("admin:tenancy_tenantmembership_changelist")).status_code == 403
    assert operator.get(reverse("admin:tenancy_tenantmembership_add")).status_code == 403
    page = operator.get(reverse("admin:sampling_run_change", args=[alpha.run.pk])).content.decode()
    assert re.search(r'id="report-link"', page) and 'id="run-money"' in page
