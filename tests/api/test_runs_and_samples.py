"""Runs, samples, report and evidence through the HTTP stack."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from analysis.reports import ReportIntegrityError
from evidence.models import EvidenceObject
from sampling.models import Run, Sample
from sampling.selectors import run_status
from tests.conftest import launch_funded, make_campaign_data
from tests.world import TenantWorld

pytestmark = pytest.mark.django_db

OPENAI = [{"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"}]


def _planned_run(questions: int, repeats: int, name: str = "big") -> Run:
    data = make_campaign_data(
        questions=questions, targets=OPENAI, repeats=repeats, tenant="alpha", name=name
    )
    return launch_funded(data)


def test_runs_list_filters_by_campaign_and_status(
    client_for: Callable[..., APIClient], two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    alpha = two_tenants[0]
    fresh = _planned_run(1, 1, name="fresh")
    client = client_for("analyst")
    everything = client.get("/api/v1/runs/").json()["results"]
    assert [r["run_id"] for r in everything] == [str(fresh.pk), str(alpha.run.pk)]
    by_campaign = client.get("/api/v1/runs/", {"campaign": fresh.campaign_id}).json()
    assert [r["run_id"] for r in by_campaign["results"]] == [str(fresh.pk)]
    finished = client.get("/api/v1/runs/", {"status": "finished"}).json()["results"]
    running = client.get("/api/v1/runs/", {"status": "running"}).json()["results"]
    assert [r["run_id"] for r in finished] == [str(alpha.run.pk)]
    assert [r["run_id"] for r in running] == [str(fresh.pk)]
    bad = client.get("/api/v1/runs/", {"status": "sideways"})
    assert bad.status_code == 400 and bad.json()["code"] == "invalid"
    assert [e["field"] for e in bad.json()["errors"]] == ["status"]


def test_run_detail_is_the_status_aggregation(
    client_for: Callable[..., APIClient], two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    run = two_tenants[0].run
    body = client_for("finance").get(f"/api/v1/runs/{run.pk}/").json()
    status = run_status(run_id=run.pk).as_dict()
    assert {key: body[key] for key in status} == status
    assert body["outcome"] != "in_progress" and body["status"] == "finished"
    assert set(body["platforms"]) == {"collector", "openai"}


def test_cancel_fails_unaccepted_samples_and_is_idempotent(
    client_for: Callable[..., APIClient], two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    run = _planned_run(2, 1, name="to cancel")
    client = client_for("operator")
    first = client.post(f"/api/v1/runs/{run.pk}/cancel")
    assert first.status_code == 200
    assert first.json()["cancelled_samples"] == 2 and first.json()["status"] == "cancelled"
    assert first.json()["failed"] == 2 and first.json()["outcome"] == "cancelled"
    # Nothing was accepted upstream: nothing to ask it to stop
    assert first.json()["upstream_cancel"] == {
        "asked": 0,
        "answered": 0,
        "acknowledged": 0,
        "failed": 0,
    }
    again = client.post(f"/api/v1/runs/{run.pk}/cancel")
    assert again.status_code == 200 and again.json()["cancelled_samples"] == 0
    cancelled = client.get("/api/v1/runs/", {"status": "cancelled"}).json()["results"]
    assert [r["run_id"] for r in cancelled] == [str(run.pk)]


def test_resume_asks_again_what_is_not_valid_and_completed(
    client_for: Callable[..., APIClient], two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    run = _planned_run(2, 1, name="to resume")
    client = client_for("operator")
    client.post(f"/api/v1/runs/{run.pk}/cancel")
    response = client.post(f"/api/v1/runs/{run.pk}/resume")
    assert response.status_code == 200
    assert response.json()["redo"] == 2 and response.json()["resume_no"] == 1
    assert client.get(f"/api/v1/runs/{run.pk}/").json()["status"] == "running"


def test_resume_while_samples_are_in_flight_is_a_409(
    client_for: Callable[..., APIClient], two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    run = _planned_run(1, 1, name="in flight")
    Sample.objects.filter(run=run).update(
        queue_state="leased", submission_state="accepted", attempts=1
    )
    response = client_for("operator").post(f"/api/v1/runs/{run.pk}/resume")
    assert response.status_code == 409 and "in flight" in response.json()["detail"]


def test_cursor_pagination_walks_over_a_thousand_samples_exactly_once(
    client_for: Callable[..., APIClient], two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    run = _planned_run(500, 2)
    expected = list(Sample.objects.filter(run=run).order_by("id").values_list("id", flat=True))
    assert len(expected) == 1000
    client = client_for("analyst")
    seen: list[int] = []
    url: str | None = f"/api/v1/runs/{run.pk}/samples/?page_size=150"
    pages = 0
    while url:
        page = client.get(url).json()
        seen.extend(sample["id"] for sample in page["results"])
        url = page["next"]
        pages += 1
    assert seen == expected and pages == 7
    first = client.get(f"/api/v1/runs/{run.pk}/samples/").json()["results"][0]
    assert first["layers"]["queue"] == "ready" and first["attempts"] == 0
    assert first["run_id"] == str(run.pk) and first["evidence"] == []


def test_samples_filter_and_link_to_their_evidence(
    client_for: Callable[..., APIClient], two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    run = two_tenants[0].run
    client = client_for("operator")
    body = client.get(f"/api/v1/runs/{run.pk}/samples/", {"platform": "collector"}).json()
    assert body["results"] and {s["platform"] for s in body["results"]} == {"collector"}
    links = [link for s in body["results"] for link in s["evidence"]]
    assert links
    download = client.get(links[0]["url"])
    assert download.status_code == 200
    assert hashlib.sha256(download.content).hexdigest() == links[0]["sha256"]


def test_sample_detail_has_citations_and_mentions(
    client_for: Callable[..., APIClient], two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    sample = (
        Sample.objects.filter(run=two_tenants[0].run, captures__citations__isnull=False)
        .order_by("id")
        .first()
    )
    assert sample is not None
    body = client_for("analyst").get(f"/api/v1/samples/{sample.pk}/").json()
    assert body["id"] == sample.pk and body["question"] and body["answer_text"]
    assert body["citations"] and body["citations"][0]["url"].startswith("http")
    assert body["mentions"] and {"entity", "mentioned", "rank"} <= set(body["mentions"][0])


@pytest.mark.parametrize(
    ("fmt", "content_type", "magic"),
    [
        ("json", "application/json", b"{"),
        ("csv", "text/csv", b""),
        ("xlsx", "application/vnd", b"PK"),
    ],
)
def test_report_downloads_in_each_format(
    fmt: str,
    content_type: str,
    magic: bytes,
    client_for: Callable[..., APIClient],
    two_tenants: tuple[TenantWorld, TenantWorld],
) -> None:
    run = two_tenants[0].run
    response = client_for("analyst").get(f"/api/v1/runs/{run.pk}/report", {"format": fmt})
    assert response.status_code == 200, response.content[:300]
    assert response["Content-Type"].startswith(content_type)
    body = b"".join(response.streaming_content) if response.streaming else response.content
    assert body.startswith(magic)
    if fmt == "json":
        assert response.json()["run_id"] == str(run.pk)


def test_report_refused_on_integrity_failure_names_the_difference(
    client_for: Callable[..., APIClient],
    two_tenants: tuple[TenantWorld, TenantWorld],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = two_tenants[0].run

    def refuse(**kwargs: Any) -> None:
        raise ReportIntegrityError(run.pk, ["overall: buckets sum to 3, planned 4"])

    monkeypatch.setattr("api.views.runs.build_run_report", refuse)
    response = client_for("operator").get(f"/api/v1/runs/{run.pk}/report")
    assert response.status_code == 409
    assert response.json()["differences"] == ["overall: buckets sum to 3, planned 4"]


def test_report_format_must_be_known(
    client_for: Callable[..., APIClient], two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    run = two_tenants[0].run
    response = client_for("operator").get(f"/api/v1/runs/{run.pk}/report", {"format": "pdf"})
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "format"


def test_evidence_of_another_tenant_is_404_and_finance_403(
    client_for: Callable[..., APIClient], two_tenants: tuple[TenantWorld, TenantWorld]
) -> None:
    obj = EvidenceObject.objects.filter(capture__sample__run=two_tenants[1].run).first()
    assert obj is not None
    url = f"/api/v1/evidence/{obj.pk}/download"
    assert client_for("analyst", 0).get(url).status_code == 404
    assert client_for("finance", 1).get(url).status_code == 403
    assert client_for("analyst", 1).get(url).status_code == 200


def test_s3_evidence_redirects_to_a_short_lived_presigned_url_after_the_check(
    s3_default_storage: str, moto_endpoint: str, simulator: Any
) -> None:
    import requests

    from tests.api.conftest import token_client
    from tests.evidence.helpers import COLLECTOR, collected_run, user

    run = collected_run(COLLECTOR, tenant="alpha", name="s3 evidence")
    clients = {
        role: token_client(user(f"s3-{role}", tenant="alpha", role=role))
        for role in ("analyst", "finance")
    }
    obj = EvidenceObject.objects.filter(capture__sample__run=run).order_by("id").first()
    assert obj is not None
    url = f"/api/v1/evidence/{obj.pk}/download"
    assert clients["finance"].get(url).status_code == 403  # no URL is issued
    response = clients["analyst"].get(url)
    assert response.status_code == 302
    location = response["Location"]
    assert location.startswith(f"{moto_endpoint}/{s3_default_storage}/")
    assert "X-Amz-Expires=60" in location
    fetched = requests.get(location, timeout=10)
    assert hashlib.sha256(fetched.content).hexdigest() == obj.sha256
