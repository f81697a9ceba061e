"""The OpenAPI schema and its docs pages, served from local static files."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db

PATHS = [
    "/api/v1/alerts/",
    "/api/v1/alerts/{id}/acknowledge",
    "/api/v1/campaigns/",
    "/api/v1/campaigns/{id}/",
    "/api/v1/campaigns/{id}/preview",
    "/api/v1/campaigns/{id}/launch",
    "/api/v1/campaigns/{id}/series",
    "/api/v1/runs/",
    "/api/v1/runs/{run_id}/",
    "/api/v1/runs/{run_id}/cancel",
    "/api/v1/runs/{run_id}/resume",
    "/api/v1/runs/{run_id}/samples/",
    "/api/v1/runs/{run_id}/report",
    "/api/v1/runs/{run_id}/reconciliation",
    "/api/v1/samples/{id}/",
    "/api/v1/ledger/entries/",
    "/api/v1/accounts/",
    "/api/v1/statements/",
    "/api/v1/statement-imports/{id}",
    "/api/v1/evidence/{id}/download",
    "/api/v1/webhooks/",
    "/api/v1/webhooks/{id}/",
    "/api/v1/webhooks/{id}/rotate-secret",
    "/api/v1/webhooks/{id}/deliveries/",
    "/api/v1/webhooks/{id}/deliveries/{delivery_id}/redeliver",
    "/api/v1/tokens/",
    "/api/v1/tokens/{id}/revoke",
]


def test_schema_lists_every_endpoint_with_a_description_and_examples() -> None:
    response = APIClient().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    assert sorted(schema["paths"]) == sorted(PATHS)
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            if method == "parameters":
                continue
            assert operation.get("description"), (path, method)
            text = str(operation)
            assert "'examples'" in text or "'example'" in text, (path, method)


@pytest.mark.parametrize("page", ["/api/docs/", "/api/redoc/"])
def test_docs_pages_load_their_scripts_from_our_static_files(page: str) -> None:
    html = APIClient().get(page).content.decode()
    assert "/static/drf_spectacular_sidecar/" in html
    assert "cdn." not in html and "unpkg" not in html and "jsdelivr" not in html
