"""Ledger entries, accounts, reconciliation and statement upload (finance)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.contrib.auth import get_user_model
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from billing.models import Account, JournalEntry, UpstreamStatement
from billing.services import derived_balance
from tenancy.services import grant_platform_finance
from tests.api.conftest import token_client
from tests.billing.conftest import run_queued_imports
from tests.world import TenantWorld

pytestmark = pytest.mark.django_db


@pytest.fixture
def platform_finance(two_tenants: tuple[TenantWorld, TenantWorld]) -> APIClient:
    """The platform operator's finance: provider statements are theirs to import."""
    grant_platform_finance(username="platform-fin")
    return token_client(get_user_model().objects.get(username="platform-fin"))


def test_ledger_entries_are_the_callers_tenants_with_postings(
    client_for: Callable[..., APIClient], two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    alpha = two_tenants[0]
    client = client_for("finance")
    entries: list[dict[str, object]] = []
    url: str | None = "/api/v1/ledger/entries/?page_size=5"
    while url:
        page = client.get(url).json()
        entries.extend(page["results"])
        url = page["next"]
    expected = JournalEntry.objects.filter(tenant=alpha.tenant).count()
    assert len(entries) == expected > 0
    assert {e["tenant"] for e in entries} == {"alpha"}
    assert all(sum(p["amount"] for p in e["postings"]) == 0 for e in entries)  # type: ignore[attr-defined]
    by_run = client.get("/api/v1/ledger/entries/", {"run": str(alpha.run.pk)}).json()["results"]
    assert by_run and {e["run_id"] for e in by_run} == {str(alpha.run.pk)}


def test_accounts_show_balances_in_minor_and_major_units(
    client_for: Callable[..., APIClient], two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    accounts = client_for("finance").get("/api/v1/accounts/").json()["results"]
    assert accounts and {a["tenant"] for a in accounts} == {"alpha"}
    available = next(a for a in accounts if a["kind"] == "available")
    assert available["balance_display"].endswith(available["currency"])


def test_every_kind_of_account_shows_the_sum_of_its_postings(
    client_for: Callable[..., APIClient], two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    """Revenue keeps no cached balance; the API sums its postings instead of showing 0."""
    accounts = client_for("finance").get("/api/v1/accounts/").json()["results"]
    posted = {
        a.pk: derived_balance(a) for a in Account.objects.filter(tenant=two_tenants[0].tenant)
    }
    assert {a["id"]: a["balance"] for a in accounts} == posted
    assert any(a["kind"] == "revenue" and a["balance"] > 0 for a in accounts)


def test_reconciliation_of_a_run_joins_charges_costs_and_the_statement(
    client_for: Callable[..., APIClient], two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    run = two_tenants[0].run
    body = client_for("finance").get(f"/api/v1/runs/{run.pk}/reconciliation").json()
    assert body["run_id"] == str(run.pk) and body["rows"]
    assert {row["run_id"] for row in body["rows"] if row["run_id"]} == {str(run.pk)}
    assert sum(body["counts"].values()) == len(body["rows"])


def _csv(*rows: str) -> SimpleUploadedFile:
    text = "\n".join(["upstream_id,amount,currency,occurred_at", *rows])
    return SimpleUploadedFile("stmt.csv", text.encode(), content_type="text/csv")


def test_statement_upload_imports_once(platform_finance: APIClient) -> None:
    client = platform_finance
    rows = ("api-t1,0.30,USD,2026-11-12T02:00:00Z", "api-t2,0.40,USD,2026-11-12T02:00:00Z")
    queued = client.post("/api/v1/statements/", {"provider": "collector", "file": _csv(*rows)})
    assert queued.status_code == 202 and queued.json()["status"] == "queued"
    assert client.get(queued.json()["url"]).json()["status"] == "queued"
    assert run_queued_imports() == ["done"]
    first = client.get(queued.json()["url"]).json()
    assert (first["status"], first["imported"], first["created"]) == ("done", 2, True)
    assert first["rows_total"] == first["rows_done"] == 2
    again = client.post("/api/v1/statements/", {"provider": "collector", "file": _csv(*rows)})
    assert again.status_code == 202 and run_queued_imports() == ["done"]
    second = client.get(again.json()["url"]).json()
    assert second["created"] is False and second["statement_id"] == first["statement_id"]


def test_statement_upload_names_every_bad_row_and_imports_nothing(
    platform_finance: APIClient,
) -> None:
    before = UpstreamStatement.objects.count()
    upload = _csv(
        "api-t1,0.30,USD,2026-11-12T02:00:00Z",
        "api-t2,1.555,USD,2026-11-12T02:00:00Z",
        "api-t3,0.40,usd1,2026-11-12",
    )
    response = platform_finance.post(
        "/api/v1/statements/", {"provider": "collector", "file": upload}
    )
    assert response.status_code == 202 and run_queued_imports() == ["failed"]
    failed = platform_finance.get(response.json()["url"]).json()
    assert failed["status"] == "failed" and failed["statement_id"] is None
    errors = failed["errors"]
    assert {(e["row"], e["field"]) for e in errors} == {
        (3, "amount"),
        (4, "currency"),
        (4, "occurred_at"),
    }
    assert UpstreamStatement.objects.count() == before


def test_statement_upload_without_a_file_is_a_400(platform_finance: APIClient) -> None:
    response = platform_finance.post("/api/v1/statements/", {"provider": "collector"})
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "file"


def test_a_tenants_finance_may_not_upload_a_provider_statement(
    client_for: Callable[..., APIClient], two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    """Statements are the platform operator's bill: tenant B's finance filing a line for one of
    A's tasks would turn A's reconciliation to amount_mismatch (issue 28)."""
    alpha_task = next(
        row["upstream_id"]
        for row in client_for("finance")
        .get(f"/api/v1/runs/{two_tenants[0].run.pk}/reconciliation")
        .json()["rows"]
    )
    before = UpstreamStatement.objects.count()
    upload = _csv(f"{alpha_task},9.99,USD,2026-11-12T02:00:00Z")
    response = client_for("finance", 1).post(
        "/api/v1/statements/", {"provider": "collector", "file": upload}
    )
    assert response.status_code == 403
    assert alpha_task not in response.content.decode()
    assert UpstreamStatement.objects.count() == before


def test_an_unconfigured_provider_is_refused_naming_the_configured_ones(
    platform_finance: APIClient,
) -> None:
    upload = _csv("api-t9,0.30,USD,2026-11-12T02:00:00Z")
    response = platform_finance.post(
        "/api/v1/statements/", {"provider": "colector", "file": upload}
    )
    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert error["field"] == "provider" and "collector" in error["message"]
