"""The lease scenario (claim, expiry, takeover, fenced writes), against PostgreSQL, with
concurrent claimers."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection, connections

from sampling.leases import claim_ready, claim_sample, renew_lease, requeue_expired_leases
from sampling.models import Sample, StaleWrite
from sampling.transitions import StaleToken, fenced, save_fenced
from tests.conftest import launch_funded, make_campaign_data

COLLECTOR = [{"platform": "collector", "device": "desktop", "region": "us", "mode": "web_search"}]


def _run_with(questions: int) -> Any:
    return launch_funded(make_campaign_data(questions=questions, targets=COLLECTOR, repeats=1))


def _expire_lease(sample_id: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE sampling_sample SET lease_until = now() - interval '1 second' WHERE id = %s",
            [sample_id],
        )


def _complete(sample_id: int, token: int) -> None:
    with fenced(sample_id=sample_id, token=token, operation="complete", worker="w") as sample:
        sample.failure_reason = f"written with token {token}"
        sample.queue_state = "done"
        save_fenced(sample, token)


@pytest.mark.django_db(transaction=True)
def test_lease_scenario_claim_expiry_takeover_and_fenced_writes() -> None:
    run = _run_with(1)
    sample_id = Sample.objects.get(run=run).pk

    first = claim_sample(sample_id=sample_id, owner="worker-a", lease_seconds=30)
    assert first is not None
    # No second claim while the lease holds.
    assert claim_sample(sample_id=sample_id, owner="worker-b", lease_seconds=30) is None
    assert claim_ready(platform="collector", limit=10, owner="worker-b", lease_seconds=30) == []

    _expire_lease(sample_id)
    second = claim_sample(sample_id=sample_id, owner="worker-b", lease_seconds=30)
    assert second is not None
    assert second.token > first.token

    # The old holder wakes up: its write is refused and recorded.
    with pytest.raises(StaleToken):
        _complete(sample_id, first.token)
    assert renew_lease(sample_id=sample_id, token=first.token, lease_seconds=30) is False
    stale = StaleWrite.objects.get(sample_id=sample_id)
    assert (stale.presented_token, stale.current_token) == (first.token, second.token)

    _complete(sample_id, second.token)
    assert Sample.objects.get(pk=sample_id).failure_reason == f"written with token {second.token}"

    # A duplicate completion with the same (now finished) lease is refused too.
    with pytest.raises(StaleToken):
        _complete(sample_id, second.token)
    assert StaleWrite.objects.filter(sample_id=sample_id).count() == 2


@pytest.mark.django_db(transaction=True)
def test_expired_leases_are_requeued_with_the_token_kept_until_the_next_claim() -> None:
    run = _run_with(3)
    claims = claim_ready(platform="collector", limit=3, owner="a", lease_seconds=30)
    assert len(claims) == 3
    _expire_lease(claims[0].sample_id)

    assert requeue_expired_leases() == 1

    again = claim_ready(platform="collector", limit=3, owner="b", lease_seconds=30)
    assert [(c.sample_id, c.token) for c in again] == [(claims[0].sample_id, claims[0].token + 1)]
    assert Sample.objects.filter(run=run, queue_state="leased").count() == 3


@pytest.mark.django_db(transaction=True)
def test_concurrent_claimers_never_claim_the_same_sample() -> None:
    run = _run_with(400)
    results: list[list[tuple[int, int]]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(6)

    def claimer(name: str) -> None:
        mine: list[tuple[int, int]] = []
        barrier.wait()
        try:
            while True:
                got = claim_ready(platform="collector", limit=7, owner=name, lease_seconds=60)
                assert len(got) <= 7
                if not got:
                    break
                mine += [(c.sample_id, c.token) for c in got]
                time.sleep(0)
        finally:
            connections.close_all()
        with lock:
            results.append(mine)

    threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert len(results) == 6, "a claimer failed"
    claimed = [sample_id for mine in results for sample_id, _ in mine]
    assert len(claimed) == 400
    assert len(set(claimed)) == 400
    assert sum(1 for mine in results if mine) > 1, "claims were not actually concurrent"
    assert Sample.objects.filter(run=run, queue_state="leased", fencing_token=1).count() == 400


@pytest.mark.django_db(transaction=True)
def test_a_claim_never_leases_more_than_its_limit() -> None:
    run = _run_with(50)

    claims = claim_ready(platform="collector", limit=3, owner="a", lease_seconds=30)

    assert len(claims) == 3
    assert Sample.objects.filter(run=run, queue_state="leased").count() == 3
