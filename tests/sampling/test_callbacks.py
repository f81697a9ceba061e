"""Signed provider callbacks, delivered twice, wake the poll once and never book a result."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db.models.functions import Now
from django.test import Client

from connectors.adapters.collector import sign_callback
from sampling.models import CallbackDelivery, Sample
from tests.conftest import launch_funded, make_campaign_data

SECRET = "callback-test-secret"
COLLECTOR = [{"platform": "collector", "device": "desktop", "region": "us", "mode": "web_search"}]


def _polling_sample() -> Sample:
    data = make_campaign_data(questions=1, targets=COLLECTOR, repeats=1)
    run = launch_funded(data)
    sample = Sample.objects.get(run=run)
    Sample.objects.filter(pk=sample.pk).update(
        submission_state="accepted",
        step="poll",
        upstream_id="tsk_1",
        due_at=Now() + timedelta(hours=1),
    )
    sample.refresh_from_db()
    return sample


def _post(client: Client, body: dict[str, Any], secret: str = SECRET) -> Any:
    raw = json.dumps(body).encode()
    return client.post(
        "/callbacks/collector/",
        raw,
        content_type="application/json",
        headers={"X-Collector-Signature": sign_callback(raw, secret, timestamp=int(time.time()))},
    )


@pytest.mark.django_db
def test_a_duplicate_callback_is_recognised_and_wakes_the_poll_once(settings: Any) -> None:
    settings.GEO_COLLECTOR_CALLBACK_SECRET = SECRET
    sample = _polling_sample()
    event = {
        "delivery_id": "d1",
        "event": "task.completed",
        "task_id": "tsk_1",
        "client_key": "k",
        "status": "completed",
    }
    client = Client()

    first, second = _post(client, event), _post(client, event)

    assert (first.status_code, first.json()) == (200, {"duplicate": False, "woken": 1})
    assert (second.status_code, second.json()) == (200, {"duplicate": True, "woken": 0})
    assert CallbackDelivery.objects.count() == 1
    woken = Sample.objects.get(pk=sample.pk)
    assert woken.due_at < sample.due_at
    # A callback is a hint to poll, never the result.
    assert (woken.collection_state, woken.step) == ("queued", "poll")


@pytest.mark.django_db
def test_a_callback_with_a_bad_signature_is_refused(settings: Any) -> None:
    settings.GEO_COLLECTOR_CALLBACK_SECRET = SECRET
    event = {"delivery_id": "d2", "event": "task.completed", "task_id": "tsk_1", "status": "x"}

    response = _post(Client(), event, secret="wrong")

    assert response.status_code == 401
    assert not CallbackDelivery.objects.exists()
