"""What every API answer shares, and the malformed requests that were 500s: JSON errors with
a stable code and the request id (also the X-Request-ID header and the log lines), OPTIONS,
NUL bytes and crafted cursors, the schema in JSON, the throttle's shared count and headers,
and a finished run that a cancel leaves as it was."""

from __future__ import annotations

import base64
import io
import json
import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest
from django.core.cache import cache
from django.core.cache.backends.redis import RedisCache
from django.http import HttpRequest, HttpResponse
from django.test import Client, override_settings
from django.urls import include, path
from rest_framework.test import APIClient

from api.throttling import TokenRateThrottle
from geo_collect import logs
from sampling.models import Run
from sampling.selectors import run_status
from tests.world import TenantWorld

pytestmark = pytest.mark.django_db

Clients = Callable[..., APIClient]


def _boom(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("an unexpected failure")


urlpatterns = [path("api/boom", _boom), path("", include("geo_collect.urls"))]


@contextmanager
def captured(name: str) -> Iterator[io.StringIO]:
    """The JSON lines logger `name` writes meanwhile."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.WARNING)
    logger.addHandler(handler)
    try:
        yield out
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@pytest.fixture
def api_log() -> Iterator[io.StringIO]:
    with captured("api.middleware") as out:
        yield out


def test_an_unknown_api_route_is_a_json_404_with_the_request_id(
    client_for: Clients, two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    with captured("django.request") as out:
        response = client_for("operator").get("/api/v1/no-such-thing/")
    body = response.json()
    assert response.status_code == 404 and body["code"] == "no_route"
    assert body["request_id"] and response["X-Request-ID"] == body["request_id"]
    line = json.loads(out.getvalue().splitlines()[-1])
    assert line["message"] == "Not Found: /api/v1/no-such-thing/"
    assert line["http_request_id"] == body["request_id"]


def test_a_callers_request_id_is_kept_and_a_malformed_one_replaced(
    client_for: Clients, two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    client = client_for("analyst")
    mine = client.get("/api/v1/runs/", HTTP_X_REQUEST_ID="integrator-0001")
    assert mine["X-Request-ID"] == "integrator-0001"
    odd = client.get("/api/v1/runs/", HTTP_X_REQUEST_ID="<script>")
    assert odd["X-Request-ID"] != "<script>" and len(odd["X-Request-ID"]) == 32


def test_a_405_names_its_code(
    client_for: Clients, two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    response = client_for("operator").delete("/api/v1/runs/")
    assert response.status_code == 405 and response.json()["code"] == "method_not_allowed"


@override_settings(ROOT_URLCONF=__name__)
def test_an_unhandled_error_is_a_json_500_whose_request_id_is_on_the_log_line(
    api_log: io.StringIO,
) -> None:
    response = Client(raise_request_exception=False).get("/api/boom")
    body = response.json()
    assert response.status_code == 500 and body["code"] == "internal"
    assert "unexpected failure" not in json.dumps(body)
    line = json.loads(api_log.getvalue().splitlines()[0])
    assert line["http_request_id"] == body["request_id"] == response["X-Request-ID"]
    assert "an unexpected failure" in line["exc"]


@pytest.mark.parametrize("action", ["preview", "launch"])
def test_options_answers_on_campaign_actions(
    action: str, client_for: Clients, two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    campaign = two_tenants[0].run.campaign_id
    response = client_for("operator").options(f"/api/v1/campaigns/{campaign}/{action}")
    assert response.status_code == 200 and response.json()["parses"] == ["application/json"]


@pytest.mark.parametrize("action", ["cancel", "resume"])
def test_options_answers_on_run_actions(
    action: str, client_for: Clients, two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    run = two_tenants[0].run
    assert client_for("analyst").options(f"/api/v1/runs/{run.pk}/{action}").status_code == 200


def test_options_answers_on_statements(
    client_for: Clients, two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    response = client_for("finance").options("/api/v1/statements/")
    assert response.status_code == 200 and response.json()["parses"] == ["multipart/form-data"]


@pytest.mark.parametrize(
    "query",
    ["platform=a%00b", "validity=%00", "x%00=1", "collection_state=completed&platform=\x00"],
)
def test_a_nul_byte_in_the_query_is_a_json_400(
    query: str, client_for: Clients, two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    run = two_tenants[0].run
    response = client_for("analyst").get(f"/api/v1/runs/{run.pk}/samples/?{query}")
    assert response.status_code == 400 and response.json()["code"] == "nul_byte"


@pytest.mark.parametrize(
    "url",
    [
        "/admin/sampling/sample/?failure_reason=a%00b",
        "/admin/analysis/mention/?entity=%00",
        "/admin/billing/reconciliation/?platform=%00",
        "/evidence/key/runs/a%00b.json",
    ],
)
def test_a_nul_byte_in_a_console_url_is_a_400(
    url: str, two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    client = Client()
    client.force_login(two_tenants[0].users["operator"])
    response = client.get(url)
    assert response.status_code == 400 and b"NUL byte" in response.content


def _cursor(position: str) -> str:
    return base64.b64encode(f"o=0&p={position}".encode()).decode()


@pytest.mark.parametrize(
    ("url", "cursor"),
    [
        ("/api/v1/runs/", "not-base64!"),
        ("/api/v1/runs/", _cursor("yesterday")),  # ordered by created_at
        ("/api/v1/campaigns/", _cursor("abc")),  # ordered by id
        ("/api/v1/campaigns/", _cursor("\x00")),
    ],
)
def test_a_crafted_cursor_is_a_400(
    url: str, cursor: str, client_for: Clients, two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    response = client_for("operator").get(url, {"cursor": cursor})
    assert response.status_code == 400 and response.json()["code"] == "invalid_cursor"


@pytest.mark.parametrize("value", ["0", "many", "-3"])
def test_a_page_size_that_is_not_a_positive_number_is_a_400(
    value: str, client_for: Clients, two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    response = client_for("operator").get("/api/v1/campaigns/", {"page_size": value})
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "page_size"


def test_an_empty_typed_filter_is_a_400_not_the_unfiltered_list(
    client_for: Clients, two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    response = client_for("finance").get("/api/v1/ledger/entries/?run=")
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "run"


def test_the_schema_in_json_on_format_json() -> None:
    response = APIClient().get("/api/schema/?format=json")
    assert response.status_code == 200 and "json" in response["Content-Type"]
    schema = json.loads(response.content)
    launch = schema["paths"]["/api/v1/campaigns/{id}/launch"]["post"]
    assert {"401", "403", "404", "409", "415", "429"} <= set(launch["responses"])
    assert list(launch["requestBody"]["content"]) == ["application/json"]
    report = schema["paths"]["/api/v1/runs/{run_id}/report"]["get"]["responses"]["200"]
    assert "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet" in report["content"]
    download = schema["paths"]["/api/v1/evidence/{id}/download"]["get"]["responses"]["200"]
    assert "image/png" in download["content"]


def test_cancelling_a_finished_run_is_a_409_and_changes_nothing(
    client_for: Clients, two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    run = two_tenants[0].run
    before = run_status(run_id=run.pk).as_dict()
    client = client_for("operator")
    response = client.post(f"/api/v1/runs/{run.pk}/cancel")
    assert response.status_code == 409 and response.json()["code"] == "run_finished"
    assert Run.objects.get(pk=run.pk).cancelled_at is None
    assert run_status(run_id=run.pk).as_dict() == before
    finished = client.get("/api/v1/runs/", {"status": "finished"}).json()["results"]
    assert str(run.pk) in [r["run_id"] for r in finished]


def test_a_webhook_url_over_500_characters_is_a_400(
    client_for: Clients, two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    url = "https://hooks.example.com/" + "a" * 600
    response = client_for("operator").post(
        "/api/v1/webhooks/", {"tenant": "alpha", "url": url}, format="json"
    )
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "url"


def test_the_throttle_counts_in_the_shared_cache_and_says_so_in_headers(
    client_for: Clients,
    two_tenants: tuple[TenantWorld, TenantWorld],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(TokenRateThrottle, "THROTTLE_RATES", {"api": "3/minute"})
    client = client_for("analyst")
    answers = [client.get("/api/v1/runs/") for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert [a["X-RateLimit-Remaining"] for a in answers] == ["2", "1", "0", "0"]
    assert {a["X-RateLimit-Limit"] for a in answers} == {"3"}
    assert 0 < int(answers[0]["X-RateLimit-Reset"]) <= 60
    assert answers[3].json()["code"] == "throttled" and int(answers[3]["Retry-After"]) <= 60
    if isinstance(cache, RedisCache):  # the count every gunicorn worker and host reads
        redis = cache._cache.get_client()
        counts = [int(redis.get(key)) for key in redis.scan_iter(match="*:throttle_api_*")]
        assert counts == [4]
