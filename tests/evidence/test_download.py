"""Authorised evidence download: tenant and role are checked before any byte or URL."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import requests
from django.test import Client
from django.urls import reverse

from evidence.models import EvidenceObject
from sampling.models import Sample
from simulator import SimulatorHandle
from tenancy.models import Tenant
from tests.evidence.helpers import COLLECTOR, collected_run, user

pytestmark = pytest.mark.django_db


@pytest.fixture
def objects(simulator: SimulatorHandle) -> dict[str, EvidenceObject]:
    run = collected_run(COLLECTOR)
    sample = Sample.objects.get(run=run)
    return {o.kind: o for o in EvidenceObject.objects.filter(capture__sample=sample)}


def _client(account: Any = None) -> Client:
    client = Client()
    if account is not None:
        client.force_login(account)
    return client


def _url(obj: EvidenceObject) -> str:
    return reverse("evidence:download", args=[obj.pk])


def test_an_analyst_of_the_tenant_downloads(
    local_storage: Any, objects: dict[str, EvidenceObject]
) -> None:
    client = _client(user("ana", tenant="acme", role="analyst"))
    raw = client.get(_url(objects["raw"]))
    assert raw.status_code == 200
    assert hashlib.sha256(raw.content).hexdigest() == objects["raw"].sha256
    assert raw["Content-Disposition"].startswith("attachment")  # never rendered in our origin
    assert raw["Content-Type"] == "application/octet-stream"
    assert raw["X-Content-Type-Options"] == "nosniff"
    assert "sandbox" in raw["Content-Security-Policy"]
    shot = client.get(_url(objects["screenshot"]))
    assert shot.status_code == 200 and shot["Content-Type"] == "image/png"
    assert shot["Content-Disposition"].startswith("inline")
    by_key = client.get(reverse("evidence:download_by_key", args=[objects["text"].key]))
    assert by_key.status_code == 200
    assert hashlib.sha256(by_key.content).hexdigest() == objects["text"].sha256


def test_anonymous_other_tenant_wrong_role_and_guessed_keys_are_refused(
    local_storage: Any, objects: dict[str, EvidenceObject]
) -> None:
    raw = objects["raw"]
    Tenant.objects.create(slug="globex", name="Globex Inc")
    assert _client().get(_url(raw)).status_code == 403
    assert _client(user("fin", tenant="acme", role="finance")).get(_url(raw)).status_code == 403
    outsider = _client(user("other", tenant="globex", role="analyst"))
    assert outsider.get(_url(raw)).status_code == 404
    assert outsider.get(reverse("evidence:download_by_key", args=[raw.key])).status_code == 404
    staff_without_tenant = _client(user("staff"))
    assert staff_without_tenant.get(_url(raw)).status_code == 404
    analyst = _client(user("ana2", tenant="acme", role="analyst"))
    guessed = raw.key.rsplit("/", 1)[0] + "/raw_guess"
    assert analyst.get(reverse("evidence:download_by_key", args=[guessed])).status_code == 404
    assert analyst.get(reverse("evidence:download", args=[10**9])).status_code == 404
    assert analyst.post(_url(raw)).status_code == 405


def test_a_tampered_object_is_not_served(
    local_storage: Any, objects: dict[str, EvidenceObject]
) -> None:
    text = objects["text"]
    (local_storage / text.key).write_bytes(b"changed after archiving")
    client = _client(user("ana", tenant="acme", role="analyst"))
    response = client.get(_url(text))
    assert response.status_code == 500
    assert b"changed after archiving" not in response.content


def test_s3_download_redirects_to_a_presigned_url_after_the_check(
    s3_default_storage: str, moto_endpoint: str, objects: dict[str, EvidenceObject]
) -> None:
    shot = objects["screenshot"]
    # The objects really are in the moto bucket, and private there.
    anonymous = requests.get(f"{moto_endpoint}/{s3_default_storage}/{shot.key}", timeout=10)
    assert anonymous.status_code == 403

    assert _client().get(_url(shot)).status_code == 403  # no URL is issued
    client = _client(user("ana", tenant="acme", role="analyst"))
    response = client.get(_url(shot))
    assert response.status_code == 302
    location = response["Location"]
    assert location.startswith(f"{moto_endpoint}/{s3_default_storage}/")
    assert "X-Amz-Signature=" in location and "X-Amz-Expires=60" in location
    fetched = requests.get(location, timeout=10)
    assert fetched.status_code == 200
    assert hashlib.sha256(fetched.content).hexdigest() == shot.sha256
    assert fetched.headers["Content-Type"] == "image/png"
