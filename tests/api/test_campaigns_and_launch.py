"""Campaigns, preview and launch through the HTTP stack: the console's validation messages
with field paths, the launch token protocol and the Idempotency-Key."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from api.errors import problem_items
from billing.models import EntryKind, JournalEntry
from billing.services import ensure_default_price_version, top_up
from sampling.models import Campaign, Run
from sampling.planning import PlanError, parse_campaign_spec
from tenancy.models import Tenant
from tenancy.services import grant_role
from tests.api.conftest import token_client
from tests.conftest import BASE_CAMPAIGN
from tests.world import TenantWorld

pytestmark = pytest.mark.django_db


def _body(tenant: str = "alpha", **changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE_CAMPAIGN)
    data.update(tenant=tenant, name="API campaign", **changes)
    return data


@pytest.fixture
def operator(
    client_for: Callable[..., APIClient], two_tenants: tuple[TenantWorld, TenantWorld]
) -> APIClient:
    """An operator's API client for tenant alpha, with both tenants' worlds in place."""
    return client_for("operator")


def _create(client: APIClient, **changes: Any) -> dict[str, Any]:
    response = client.post("/api/v1/campaigns/", _body(**changes), format="json")
    assert response.status_code == 201, response.content
    return dict(response.json())


def _preview(client: APIClient, campaign_id: int) -> dict[str, Any]:
    response = client.post(f"/api/v1/campaigns/{campaign_id}/preview")
    assert response.status_code == 200, response.content
    return dict(response.json())


def _launch(client: APIClient, campaign_id: int, token: str, key: str) -> Any:
    return client.post(
        f"/api/v1/campaigns/{campaign_id}/launch",
        {"preview_token": token},
        format="json",
        HTTP_IDEMPOTENCY_KEY=key,
    )


def test_operators_create_list_read_and_patch_their_campaigns(operator: APIClient) -> None:
    created = _create(operator)
    assert created["tenant"] == "alpha" and len(created["questions"]) == 2
    listed = operator.get("/api/v1/campaigns/").json()["results"]
    assert {c["tenant"] for c in listed} == {"alpha"}
    assert created["id"] in [c["id"] for c in listed]
    assert operator.get(f"/api/v1/campaigns/{created['id']}/").json() == created
    patched = operator.patch(
        f"/api/v1/campaigns/{created['id']}/", {"repeats": 3, "name": "Renamed"}, format="json"
    )
    assert patched.status_code == 200
    assert (patched.json()["repeats"], patched.json()["name"]) == (3, "Renamed")
    assert Campaign.objects.get(pk=created["id"]).name == "Renamed"


def test_validation_errors_list_every_problem_with_the_consoles_messages(
    client_for: Callable[..., APIClient], two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    bad = _body(questions=["fine", 7, ""], targets=[{"platform": ""}], repeats=0)
    response = client_for("operator").post("/api/v1/campaigns/", bad, format="json")
    assert response.status_code == 400
    errors = response.json()["errors"]
    with pytest.raises(PlanError) as console:
        parse_campaign_spec(bad)
    assert errors == problem_items(console.value.problems)
    fields = {e["field"] for e in errors}
    assert {"questions[1]", "questions[2]", "targets[0]", "repeats"} <= fields
    assert not Campaign.objects.filter(name="API campaign").exists()


def test_a_campaign_for_a_tenant_not_of_the_caller_is_refused_with_its_field(
    client_for: Callable[..., APIClient], two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    response = client_for("operator").post(
        "/api/v1/campaigns/", _body(tenant="zzbravo"), format="json"
    )
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "tenant"
    assert not Campaign.objects.filter(name="API campaign").exists()


def test_patch_errors_name_their_field_and_change_nothing(operator: APIClient) -> None:
    created = _create(operator)
    response = operator.patch(
        f"/api/v1/campaigns/{created['id']}/", {"questions": ["ok", 3]}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {"field": "questions[1]", "message": "expected a string, got int"}
    ]
    assert operator.get(f"/api/v1/campaigns/{created['id']}/").json() == created


def test_preview_shows_plan_quote_balance_and_a_token(operator: APIClient) -> None:
    created = _create(operator)
    preview = _preview(operator, created["id"])
    assert preview["samples"] == 4  # 2 questions x 1 target x 2 repeats
    assert preview["batches"] == [{"platform": "openai", "batches": 1, "sizes": [4]}]
    quote = preview["quote"]
    assert {"price_version", "unit_prices", "estimated_max", "currency"} <= set(quote)
    assert preview["available_balance"] >= quote["estimated_max"]
    assert preview["can_launch"] and preview["preview_token"]


def test_launch_is_idempotent_per_key_one_run_one_hold(operator: APIClient) -> None:
    created = _create(operator)
    token = _preview(operator, created["id"])["preview_token"]
    first = _launch(operator, created["id"], token, "key-1")
    again = _launch(operator, created["id"], token, "key-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json() == again.json()
    body = first.json()
    assert body["samples"] == 4 and body["batches"] == 1 and body["quote"]["currency"]
    runs = Run.objects.filter(campaign_id=created["id"])
    assert [str(r.pk) for r in runs] == [body["run_id"]]
    assert JournalEntry.objects.filter(run_id=body["run_id"], kind=EntryKind.RESERVE).count() == 1

    other = _preview(operator, created["id"])["preview_token"]
    conflict = _launch(operator, created["id"], other, "key-1")
    assert conflict.status_code == 409
    assert "different request" in conflict.json()["detail"]
    assert conflict.json()["code"] == "idempotency_key_reused"
    reused = _launch(operator, created["id"], token, "key-2")  # the same preview, another key
    assert reused.status_code == 409 and reused.json()["run_id"] == body["run_id"]
    assert reused.json()["code"] == "preview_used"
    assert runs.count() == 1


def test_launch_needs_the_key_and_the_token(operator: APIClient) -> None:
    created = _create(operator)
    response = operator.post(f"/api/v1/campaigns/{created['id']}/launch", {}, format="json")
    assert response.status_code == 400
    assert {e["field"] for e in response.json()["errors"]} == {"Idempotency-Key", "preview_token"}


def test_a_stale_preview_token_is_a_409_and_launches_nothing(operator: APIClient) -> None:
    created = _create(operator)
    token = _preview(operator, created["id"])["preview_token"]
    operator.patch(f"/api/v1/campaigns/{created['id']}/", {"repeats": 5}, format="json")
    response = _launch(operator, created["id"], token, "key-stale")
    assert response.status_code == 409
    assert "campaign changed" in response.json()["detail"]
    assert response.json()["code"] == "preview_stale"
    unknown = _launch(operator, created["id"], "not-a-token", "key-unknown")
    assert unknown.status_code == 409 and unknown.json()["code"] == "preview_stale"
    assert not Run.objects.filter(campaign_id=created["id"]).exists()


def test_funds_short_is_a_402_naming_the_shortfall(
    two_tenants: tuple[TenantWorld, TenantWorld],
) -> None:
    tenant = Tenant.objects.create(slug="poor", name="Poor")
    grant_role(username="poor-op", tenant=tenant, role="operator", password="pw")
    client = token_client(get_user_model().objects.get(username="poor-op"))
    created = _create(client, tenant="poor")
    version = ensure_default_price_version()
    assert _preview(client, created["id"])["can_launch"] is False  # nothing to hold with yet
    need = _preview(client, created["id"])["quote"]["estimated_max"]
    top_up(tenant=tenant, amount=need, currency=version.currency, idempotency_key="exact")
    first = _preview(client, created["id"])["preview_token"]
    second = _preview(client, created["id"])["preview_token"]
    assert _launch(client, created["id"], first, "a").status_code == 201  # holds it all
    short = _launch(client, created["id"], second, "b")
    assert short.status_code == 402
    body = short.json()
    assert (body["shortfall"], body["available"], body["required"]) == (need, 0, need)
    assert "short by" in body["detail"]
    assert Run.objects.filter(campaign_id=created["id"]).count() == 1


def test_a_platform_that_quotes_its_own_tasks_launches_at_the_previewed_quote(
    client_for: Callable[..., APIClient],
    two_tenants: tuple[TenantWorld, TenantWorld],
    simulator: Any,  # the collector's quote comes from its upstream
) -> None:
    """The collector prices tasks itself; its quote joins the run's snapshot at launch
    (pipeline/launch.py) without making the operator's preview stale."""
    client = client_for("operator")
    collector = [{"platform": "collector", "device": "desktop", "region": "us"}]
    created = _create(client, targets=collector)
    token = _preview(client, created["id"])["preview_token"]
    response = _launch(client, created["id"], token, "key-collector")
    assert response.status_code == 201, response.content
    assert "collector" in response.json()["quote"]["provider_quotes"]


def test_the_same_question_twice_is_refused_at_save(operator: APIClient) -> None:
    body = _body(questions=["Best CRM?", "best  CRM？"])

    response = operator.post("/api/v1/campaigns/", body, format="json")

    assert response.status_code == 400
    assert "the same question as 'Best CRM?'" in response.content.decode()
    assert not Campaign.objects.filter(name=body["name"]).exists()


def test_a_form_encoded_launch_is_a_415_not_a_stale_preview(operator: APIClient) -> None:
    created = _create(operator)
    token = _preview(operator, created["id"])["preview_token"]
    response = operator.post(
        f"/api/v1/campaigns/{created['id']}/launch",
        f"preview_token={token}",
        content_type="application/x-www-form-urlencoded",
        HTTP_IDEMPOTENCY_KEY="key-form",
    )
    assert response.status_code == 415 and response.json()["code"] == "unsupported_media_type"
    assert not Run.objects.filter(campaign_id=created["id"]).exists()
    assert _launch(operator, created["id"], token, "key-json").status_code == 201
