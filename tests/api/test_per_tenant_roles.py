"""Every API write is decided by the caller's role in the tenant of the row it touches (or
the tenant it names), never by the union of their roles: users with a different role in each
of the two tenants write to either tenant, and only the role there lets them. A row of a
tenant where they hold a role their role does not allow is a 403 and changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from api.models import DeliveryState, WebhookDelivery, WebhookEndpoint
from pipeline.launch import launch_run
from sampling.models import Campaign, Run
from tenancy.roles import ROLE_PERMISSIONS, ROLES, role_allows
from tenancy.services import grant_role
from tests.api.conftest import token_client
from tests.world import TenantWorld

pytestmark = pytest.mark.django_db

PAIRS = [(a, b) for a in ROLES for b in ROLES if a != b]
TARGETS = ("alpha", "bravo")
SECRET = "s" * 40


@pytest.fixture(autouse=True)
def outbound(settings: Any) -> None:
    settings.GEO_OUTBOUND_RESOLVE = {"hooks.example.com": ["93.184.216.34"]}


@dataclass
class Case:
    client: APIClient
    world: TenantWorld


@dataclass
class Write:
    """A request, the permission the target tenant's role must grant, and whether the row
    is still as it was (checked when the write is refused)."""

    perm: str
    send: Callable[[Case], Any]
    unchanged: Callable[[Case, Any], bool] = lambda case, state: True


def _endpoint(case: Case) -> WebhookEndpoint:
    return WebhookEndpoint.objects.create(
        tenant=case.world.tenant, url="https://hooks.example.com/geo", secret=SECRET
    )


def _open_run(case: Case) -> Run:
    return launch_run(campaign=case.world.run.campaign)


def _refused_create(response: Any) -> bool:
    """No role of the caller may create it anywhere (403), or not in the tenant named (400)."""
    return response.status_code == 403 or "is not one of your tenants" in response.content.decode()


def create_campaign(case: Case) -> Any:
    body = {"tenant": case.world.tenant.slug, "name": "matrix campaign"}
    response = case.client.post("/api/v1/campaigns/", body, format="json")
    return response, _refused_create(response)


def patch_campaign(case: Case) -> Any:
    url = f"/api/v1/campaigns/{case.world.run.campaign_id}/"
    return case.client.patch(url, {"repeats": 3}, format="json")


def preview(case: Case) -> Any:
    url = f"/api/v1/campaigns/{case.world.run.campaign_id}/preview"
    return case.client.post(url, {}, format="json")


def launch(case: Case) -> Any:
    url = f"/api/v1/campaigns/{case.world.run.campaign_id}/launch"
    return case.client.post(url, {"token": "stale"}, format="json")


def cancel(case: Case) -> Any:
    run = _open_run(case)
    return case.client.post(f"/api/v1/runs/{run.pk}/cancel", format="json"), run


def resume(case: Case) -> Any:
    return case.client.post(f"/api/v1/runs/{case.world.run.pk}/resume", format="json")


def register_webhook(case: Case) -> Any:
    body = {"tenant": case.world.tenant.slug, "url": "https://hooks.example.com/new"}
    response = case.client.post("/api/v1/webhooks/", body, format="json")
    return response, _refused_create(response)


def patch_webhook(case: Case) -> Any:
    endpoint = _endpoint(case)
    url = f"/api/v1/webhooks/{endpoint.pk}/"
    return case.client.patch(url, {"active": False}, format="json"), endpoint


def delete_webhook(case: Case) -> Any:
    endpoint = _endpoint(case)
    return case.client.delete(f"/api/v1/webhooks/{endpoint.pk}/"), endpoint


def rotate_secret(case: Case) -> Any:
    endpoint = _endpoint(case)
    url = f"/api/v1/webhooks/{endpoint.pk}/rotate-secret"
    return case.client.post(url, format="json"), endpoint


def redeliver(case: Case) -> Any:
    endpoint = _endpoint(case)
    delivery = WebhookDelivery.objects.create(
        endpoint=endpoint, event="run.finished", run=case.world.run, dedupe_key="matrix",
        payload={}, state=DeliveryState.FAILED, attempts=8,
    )  # fmt: skip
    url = f"/api/v1/webhooks/{endpoint.pk}/deliveries/{delivery.pk}/redeliver"
    return case.client.post(url, format="json"), delivery


def _same_endpoint(case: Case, endpoint: WebhookEndpoint) -> bool:
    now = WebhookEndpoint.objects.filter(pk=endpoint.pk).first()
    return now is not None and (now.active, now.secret) == (True, SECRET)


def _not_cancelled(case: Case, run: Run) -> bool:
    run.refresh_from_db()
    return run.cancelled_at is None


def _not_redelivered(case: Case, delivery: WebhookDelivery) -> bool:
    delivery.refresh_from_db()
    return delivery.redeliveries == 0


WRITES: dict[str, Write] = {
    "create campaign": Write("sampling.add_campaign", create_campaign),
    "patch campaign": Write("sampling.change_campaign", patch_campaign),
    "preview": Write("sampling.add_run", preview),
    "launch": Write("sampling.add_run", launch),
    "cancel": Write("sampling.change_run", cancel, _not_cancelled),
    "resume": Write("sampling.change_run", resume),
    "register webhook": Write("api.add_webhookendpoint", register_webhook),
    "patch webhook": Write("api.change_webhookendpoint", patch_webhook, _same_endpoint),
    "delete webhook": Write("api.delete_webhookendpoint", delete_webhook, _same_endpoint),
    "rotate secret": Write("api.change_webhookendpoint", rotate_secret, _same_endpoint),
    "redeliver": Write("api.change_webhookendpoint", redeliver, _not_redelivered),
}
CREATES = {"create campaign", "register webhook"}  # name a tenant: refused is a 400 naming it


def _case(two_tenants: tuple[TenantWorld, TenantWorld], pair: tuple[str, str], target: str) -> Case:
    alpha, bravo = two_tenants
    username = f"api-{pair[0]}-{pair[1]}"
    grant_role(username=username, tenant=alpha.tenant, role=pair[0])
    grant_role(username=username, tenant=bravo.tenant, role=pair[1])
    user = get_user_model().objects.get(username=username)
    return Case(token_client(user), alpha if target == "alpha" else bravo)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("pair", PAIRS, ids="-".join)
@pytest.mark.parametrize("name", list(WRITES))
def test_only_the_role_in_the_rows_tenant_allows_the_api_write(
    two_tenants: tuple[TenantWorld, TenantWorld], name: str, pair: tuple[str, str], target: str
) -> None:
    write = WRITES[name]
    case = _case(two_tenants, pair, target)
    campaigns = Campaign.objects.count()
    answer = write.send(case)
    response, state = answer if isinstance(answer, tuple) else (answer, None)
    allowed = role_allows(pair[TARGETS.index(target)], write.perm)
    if name in CREATES:
        refused = bool(state)
        assert refused == (not allowed), (name, pair, target, response.status_code)
        assert not refused or response.status_code in (400, 403)
        assert not refused or Campaign.objects.count() == campaigns
        return
    if allowed:
        assert response.status_code not in (403, 404), (name, pair, target, response.content)
    else:
        assert response.status_code == 403, (name, pair, target, response.status_code)
        assert write.unchanged(case, state), (name, pair, target)


def test_each_api_write_has_a_role_that_may_and_one_that_may_not() -> None:
    for name, write in WRITES.items():
        allowed = {role for role in ROLES if write.perm in ROLE_PERMISSIONS[role]}
        assert allowed and allowed != set(ROLES), name


TENANT_FILTERED = [
    ("operator", "/api/v1/campaigns/"),
    ("finance", "/api/v1/ledger/entries/"),
    ("finance", "/api/v1/accounts/"),
]


@pytest.mark.parametrize(("role", "url"), TENANT_FILTERED)
def test_the_tenant_filter_answers_alike_for_another_tenants_id_and_an_unknown_one(
    two_tenants: tuple[TenantWorld, TenantWorld], role: str, url: str
) -> None:
    alpha, bravo = two_tenants
    client = token_client(alpha.users[role])
    unknown = max(alpha.tenant.pk, bravo.tenant.pk) + 1000
    tenants = {
        "own": alpha.tenant.pk,
        "other": bravo.tenant.pk,
        "unknown": unknown,
        "huge": 10**30,
        "negative": -1,
    }
    answers = {name: client.get(url, {"tenant": tenant}) for name, tenant in tenants.items()}
    assert answers["own"].status_code == 200 and answers["own"].json()["results"]
    for name in ("other", "unknown", "huge", "negative"):
        assert answers[name].status_code == 200, (name, answers[name].content)
        assert answers[name].json()["results"] == [], name
    # Not a number: a 400 naming the parameter, whoever asks.
    bad = client.get(url, {"tenant": "abc"})
    assert bad.status_code == 400 and "tenant" in bad.content.decode()
