"""The worker process's one lease renewer (pipeline.step_context.LeaseRenewer): each lease a
step holds is renewed every third of a lease while the step works, and no longer once the
step ends or the lease was taken over."""

from __future__ import annotations

import time
from typing import Any

import pytest

from pipeline.step_context import RENEWER, keep_lease
from sampling.leases import claim_sample
from sampling.models import Sample
from tests.conftest import launch_funded, make_campaign_data

pytestmark = pytest.mark.django_db(transaction=True)  # the renewer has its own connection


@pytest.fixture(autouse=True)
def _renewer_idle_after() -> Any:
    yield
    # Idle, the renewer closes its database session (the test database is dropped after).
    assert _until(lambda: not RENEWER.held()) and RENEWER.wait_idle(10)


def _claimed(settings: Any) -> tuple[Sample, int]:
    settings.GEO_LEASE_SECONDS = 3  # renewed every second
    target = {"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"}
    data = make_campaign_data(questions=1, targets=[target], repeats=1)
    sample = Sample.objects.filter(run=launch_funded(data)).first()
    assert sample is not None
    claim = claim_sample(sample_id=sample.pk, owner="test", lease_seconds=3)
    assert claim is not None
    return sample, claim.token


def _lease_until(sample: Sample) -> Any:
    return Sample.objects.values_list("lease_until", flat=True).get(pk=sample.pk)


def _until(condition: Any, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def test_a_held_lease_is_renewed_while_its_step_works_and_not_after(settings: Any) -> None:
    sample, token = _claimed(settings)
    first = _lease_until(sample)

    with keep_lease(sample_id=sample.pk, token=token):
        assert _until(lambda: _lease_until(sample) > first)
        assert (sample.pk, token) in RENEWER.held()

    assert (sample.pk, token) not in RENEWER.held()


def test_a_lease_taken_over_is_no_longer_renewed(settings: Any) -> None:
    sample, token = _claimed(settings)
    Sample.objects.filter(pk=sample.pk).update(fencing_token=token + 1)  # another holder now

    with keep_lease(sample_id=sample.pk, token=token):
        assert _until(lambda: (sample.pk, token) not in RENEWER.held())


def test_a_second_copy_of_a_message_ending_early_keeps_the_first_ones_lease(
    settings: Any,
) -> None:
    sample, token = _claimed(settings)
    first = _lease_until(sample)

    with keep_lease(sample_id=sample.pk, token=token):
        with keep_lease(sample_id=sample.pk, token=token):
            pass  # the duplicate stops at once
        assert (sample.pk, token) in RENEWER.held()
        assert _until(lambda: _lease_until(sample) > first)
