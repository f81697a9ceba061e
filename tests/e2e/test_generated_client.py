"""An integrator's client, generated from the served schema by openapi-python-client (into
tmp_path, at test time, no network), drives a campaign against a live server: create,
preview, launch, poll until finished, report. A real Celery worker collects from the
simulator over HTTP; the dispatcher's loop runs in this process."""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any
from uuid import UUID

import httpx
import pytest
from django.contrib.auth import get_user_model

from api.auth import new_token
from tenancy.services import grant_role
from tests.conftest import BASE_CAMPAIGN, ensure_tenant, fund_tenant
from tests.dispatching import tick_until

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PACKAGE = "geo_client"
CONFIG = f"post_hooks: []\nproject_name_override: {PACKAGE}\npackage_name_override: {PACKAGE}\n"


@pytest.fixture
def generated_client(live_server: Any, tmp_path: Path) -> Iterator[ModuleType]:
    """The client package generated from `/api/schema/?format=json` as served."""
    served = httpx.get(f"{live_server.url}/api/schema/?format=json", timeout=30)
    assert served.status_code == 200 and "json" in served.headers["content-type"]
    (tmp_path / "schema.json").write_bytes(served.content)
    (tmp_path / "config.yaml").write_text(CONFIG)
    generator = Path(sys.executable).with_name("openapi-python-client")
    files = {"--path": "schema.json", "--output-path": PACKAGE, "--config": "config.yaml"}
    options = [part for flag, name in files.items() for part in (flag, str(tmp_path / name))]
    subprocess.run(
        [str(generator), "generate", *options, "--meta", "none"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]


def _operator_token() -> str:
    tenant = fund_tenant(ensure_tenant("genclient"))
    grant_role(username="genclient-op", tenant=tenant, role="operator", password="pw")
    return new_token(user=get_user_model().objects.get(username="genclient-op"))


def test_a_client_generated_from_the_schema_runs_a_campaign_end_to_end(
    live_server: Any, generated_client: ModuleType, celery_worker: Any, simulator: Any
) -> None:
    celery_worker()
    campaigns = importlib.import_module(f"{PACKAGE}.api.campaigns")
    runs = importlib.import_module(f"{PACKAGE}.api.runs")
    models = importlib.import_module(f"{PACKAGE}.models")
    for name in ("campaigns_create", "campaigns_preview_create", "campaigns_launch_create"):
        importlib.import_module(f"{campaigns.__name__}.{name}")
    for name in ("runs_retrieve", "runs_report_retrieve"):
        importlib.import_module(f"{runs.__name__}.{name}")
    client = generated_client.AuthenticatedClient(base_url=live_server.url, token=_operator_token())

    body = models.CampaignBodyRequest.from_dict(
        {
            **BASE_CAMPAIGN,
            "tenant": "genclient",
            "name": "generated client",
            "targets": [
                {"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"}
            ],
            "repeats": 1,
        }
    )
    created = campaigns.campaigns_create.sync_detailed(client=client, body=body)
    assert created.status_code == 201, created.content
    campaign_id = created.parsed.id

    preview = campaigns.campaigns_preview_create.sync(id=campaign_id, client=client)
    assert isinstance(preview, models.Preview) and preview.can_launch, preview
    launched = campaigns.campaigns_launch_create.sync_detailed(
        id=campaign_id,
        client=client,
        body=models.LaunchRequestRequest(preview_token=preview.preview_token),
        idempotency_key="generated-client-1",
    )
    assert launched.status_code == 201, launched.content
    run_id: UUID = launched.parsed.run_id
    assert launched.parsed.samples == preview.samples
    refused = campaigns.campaigns_launch_create.sync_detailed(
        id=campaign_id,
        client=client,
        body=models.LaunchRequestRequest(preview_token=preview.preview_token),
        idempotency_key="generated-client-2",
    )
    assert refused.status_code == 409 and refused.parsed.code == "preview_used"

    def finished() -> Any:
        status = runs.runs_retrieve.sync(run_id=run_id, client=client)
        return status if status is not None and status.finished else None

    status = tick_until(finished, timeout=180.0, owner="generated-client")
    assert status.outcome == "all_succeeded" and status.planned == preview.samples

    report = runs.runs_report_retrieve.sync_detailed(run_id=run_id, client=client)
    assert report.status_code == 200, report.content[:300]
    assert report.parsed["run_id"] == str(run_id)
