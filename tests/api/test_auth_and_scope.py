"""Every endpoint: anonymous -> 401, another tenant's object -> 404, a role that may not ->
403. Tokens are stored hashed and shown once."""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from api.models import ApiToken
from evidence.models import EvidenceObject
from sampling.models import Sample
from tests.world import TenantWorld

pytestmark = pytest.mark.django_db


# The endpoints under one campaign and under one run: (name, method, path below the object).
CAMPAIGN_ENDPOINTS = [
    ("campaign", "get", ""),
    ("campaign_patch", "patch", ""),
    ("preview", "post", "preview"),
    ("launch", "post", "launch"),
]
RUN_ENDPOINTS = [("run", "get", ""), ("cancel", "post", "cancel"), ("resume", "post", "resume")]
RUN_ENDPOINTS += [("samples", "get", "samples/"), ("report", "get", "report")]
RUN_ENDPOINTS += [("reconciliation", "get", "reconciliation")]


def _urls(world: TenantWorld) -> dict[str, tuple[str, str]]:
    run = world.run
    sample = Sample.objects.filter(run=run).order_by("id").first()
    obj = EvidenceObject.objects.filter(capture__sample__run=run).order_by("id").first()
    assert sample is not None and obj is not None
    under = [(f"/api/v1/campaigns/{run.campaign_id}/", CAMPAIGN_ENDPOINTS)]
    under.append((f"/api/v1/runs/{run.pk}/", RUN_ENDPOINTS))
    urls = {name: (method, base + path) for base, names in under for name, method, path in names}
    urls["sample"] = ("get", f"/api/v1/samples/{sample.pk}/")
    urls["evidence"] = ("get", f"/api/v1/evidence/{obj.pk}/download")
    return urls


LISTS = [
    ("get", "/api/v1/campaigns/"),
    ("post", "/api/v1/campaigns/"),
    ("get", "/api/v1/runs/"),
    ("get", "/api/v1/ledger/entries/"),
    ("get", "/api/v1/accounts/"),
    ("post", "/api/v1/statements/"),
]


def _call(client: APIClient, method: str, url: str) -> Any:
    kind = "multipart" if url.endswith("/statements/") else "json"
    return getattr(client, method)(url, {}, format=kind)


def test_anonymous_callers_get_401_on_every_endpoint(
    two_tenants: tuple[TenantWorld, TenantWorld],
) -> None:
    client = APIClient()
    for method, url in [*_urls(two_tenants[0]).values(), *LISTS]:
        response = _call(client, method, url)
        assert response.status_code == 401, (method, url, response.status_code)
        assert response["WWW-Authenticate"].startswith("Bearer")


def test_a_wrong_token_is_401() -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer geo_not-a-token")
    assert client.get("/api/v1/runs/").status_code == 401


def test_another_tenants_objects_are_404_for_every_role(
    two_tenants: tuple[TenantWorld, TenantWorld], client_for: Callable[..., APIClient]
) -> None:
    bravo_urls = _urls(two_tenants[1])
    for role in ("operator", "analyst", "finance"):
        client = client_for(role, 0)
        for name, (method, url) in bravo_urls.items():
            response = _call(client, method, url)
            assert response.status_code == 404, (role, name, response.status_code)
    # an unknown id looks the same
    assert client_for("operator").get(f"/api/v1/runs/{uuid.uuid4()}/").status_code == 404


# Which endpoints each role may NOT use on its own tenant's objects (403).
FORBIDDEN = {
    "operator": {"reconciliation"},
    "analyst": {
        "campaign", "campaign_patch", "preview", "launch", "cancel", "resume", "reconciliation",
    },
    "finance": {
        "campaign", "campaign_patch", "preview", "launch", "cancel", "resume", "samples",
        "report", "sample", "evidence",
    },
}  # fmt: skip
CAMPAIGNS = {("get", "/api/v1/campaigns/"), ("post", "/api/v1/campaigns/")}
FINANCE = {
    ("get", "/api/v1/ledger/entries/"),
    ("get", "/api/v1/accounts/"),
    ("post", "/api/v1/statements/"),
}
# Provider statements are the platform operator's: no tenant role uploads them.
STATEMENTS = {("post", "/api/v1/statements/")}
FORBIDDEN_LISTS = {
    "operator": FINANCE,
    "analyst": CAMPAIGNS | FINANCE,
    "finance": CAMPAIGNS | STATEMENTS,
}


@pytest.mark.parametrize("role", ["operator", "analyst", "finance"])
def test_a_role_that_may_not_gets_403_on_its_own_tenant(
    role: str, two_tenants: tuple[TenantWorld, TenantWorld], client_for: Callable[..., APIClient]
) -> None:
    client = client_for(role, 0)
    for name, (method, url) in _urls(two_tenants[0]).items():
        status = _call(client, method, url).status_code
        if name in FORBIDDEN[role]:
            assert status == 403, (role, name, status)
        else:
            assert status != 403 and status != 404, (role, name, status)
    for method, url in LISTS:
        status = _call(client, method, url).status_code
        if (method, url) in FORBIDDEN_LISTS[role]:
            assert status == 403, (role, url, status)
        else:
            assert status in (200, 400), (role, url, status)


def test_a_user_without_any_tenant_role_gets_403_on_lists(
    two_tenants: tuple[TenantWorld, TenantWorld],
) -> None:
    from django.contrib.auth import get_user_model

    from tests.api.conftest import token_client

    nobody = get_user_model().objects.create_user("nobody", "n@example.com", "pw")
    client = token_client(nobody)
    for method, url in LISTS:
        assert _call(client, method, url).status_code == 403, url
    assert client.get(_urls(two_tenants[0])["run"][1]).status_code == 404


def test_api_token_command_prints_a_working_token_stored_only_as_a_hash(
    two_tenants: tuple[TenantWorld, TenantWorld],
) -> None:
    user = two_tenants[0].users["analyst"]
    out = io.StringIO()
    call_command("api_token", user.get_username(), stdout=out)
    token = out.getvalue().strip()
    stored = ApiToken.objects.get(user=user)
    assert token not in (stored.digest, stored.prefix) and token.startswith(stored.prefix)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    response = client.get("/api/v1/runs/")
    assert response.status_code == 200
    assert [r["run_id"] for r in response.json()["results"]] == [str(two_tenants[0].run.pk)]


def test_session_login_works_for_the_browsable_api(
    two_tenants: tuple[TenantWorld, TenantWorld],
) -> None:
    from tests.world import PASSWORD

    client = APIClient()
    assert client.login(username=two_tenants[0].users["analyst"].get_username(), password=PASSWORD)
    response = client.get("/api/v1/runs/", HTTP_ACCEPT="text/html")
    assert response.status_code == 200
    assert str(two_tenants[0].run.pk) in response.content.decode()


def test_throttling_is_per_token(
    two_tenants: tuple[TenantWorld, TenantWorld], monkeypatch: pytest.MonkeyPatch
) -> None:
    from api.throttling import TokenRateThrottle
    from tests.api.conftest import token_client

    monkeypatch.setattr(TokenRateThrottle, "THROTTLE_RATES", {"api": "2/minute"})
    first = token_client(two_tenants[0].users["analyst"])
    second = token_client(two_tenants[0].users["analyst"])
    assert [first.get("/api/v1/runs/").status_code for _ in range(3)] == [200, 200, 429]
    assert second.get("/api/v1/runs/").status_code == 200


def test_request_bodies_over_the_cap_are_refused(
    client_for: Callable[..., APIClient], settings: Any
) -> None:
    settings.GEO_API_MAX_BODY_BYTES = 1000
    response = client_for("operator").post(
        "/api/v1/campaigns/", {"name": "x" * 2000}, format="json"
    )
    assert response.status_code == 413
