"""The dispatcher's leader lease: a stopped leader is replaced within a bound, its late writes
are refused, and a leader that renews keeps the lease (pipeline/leadership.py)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection, transaction
from django.db.models.functions import Now

from geo_collect import metrics
from geo_collect.processes import ManagedProcess, dispatcher_command, stop_all
from pipeline.dispatch import relay_outbox
from pipeline.leadership import Leadership
from pipeline.models import LeaderLease
from sampling.leases import claim_ready, requeue_expired_leases
from sampling.models import OutboxMessage, Sample
from tests.conftest import launch_funded, make_campaign_data
from tests.services import database_url, empty_broker

COLLECTOR = [{"platform": "collector", "device": "desktop", "region": "us", "mode": "web_search"}]
LEASE = 1.0  # seconds, for the in-process leaders
CHECK = 0.2


@pytest.fixture(autouse=True)
def _empty_broker() -> Iterator[None]:
    with empty_broker(django_settings.CELERY_BROKER_URL):
        yield


def _leader(holder: str) -> Leadership:
    return Leadership(holder=holder, lease_seconds=LEASE, check_seconds=CHECK)


def _launch(questions: int = 3) -> Any:
    data = make_campaign_data(questions=questions, targets=COLLECTOR, repeats=1, tenant="acme")
    return launch_funded(data)


def _takeovers() -> float:
    value: float = metrics.LEADER_TAKEOVERS.labels("dispatcher")._value.get()
    return value


def _claim(leader: Leadership) -> list[Any]:
    return claim_ready(
        platform="collector", limit=10, owner=leader.holder, lease_seconds=60, fence=leader.fence()
    )


@pytest.mark.django_db(transaction=True)  # autocommit, as the dispatcher runs
def test_a_leader_that_stops_renewing_is_replaced_within_lease_and_check(caplog: Any) -> None:
    old, standby = _leader("old"), _leader("standby")
    assert old.hold() and not standby.hold()
    taken_before = _takeovers()

    started = time.monotonic()  # `old` renews no more, as if stopped
    while not standby.hold():
        assert time.monotonic() - started < LEASE + CHECK + 2, "the standby never took over"
        time.sleep(0.05)

    assert time.monotonic() - started >= LEASE - 0.1  # not before the lease ran out
    assert standby.epoch == 2 and old.epoch == 1
    assert _takeovers() == taken_before + 1
    assert "leadership taken over: holder=standby old_holder=old epoch=2" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_the_old_leaders_late_writes_are_refused_and_it_stands_down(caplog: Any) -> None:
    old, standby = _leader("old"), _leader("standby")
    assert old.hold()
    _launch(questions=3)
    # A tick the old leader began before it stopped: its fence, taken then.
    fence_from_before = old.fence()
    time.sleep(LEASE + 0.05)
    assert standby.hold()

    assert (
        claim_ready(
            platform="collector", limit=10, owner="old", lease_seconds=60, fence=fence_from_before
        )
        == []
    )
    Sample.objects.update(queue_state="leased", lease_until=Now())  # leases run out now
    assert requeue_expired_leases(fence=fence_from_before) == 0
    message = OutboxMessage.objects.create(task="pipeline.run_finished", payload={"run_id": "x"})
    relay_outbox(fence=fence_from_before)
    message.refresh_from_db()
    assert message.sent_at is None  # its mark refused; the new leader relays it again

    assert not old.hold() and not old.leading  # its next renewal finds out and stands down
    assert "leadership lost: old no longer holds the dispatcher lease (epoch 1)" in caplog.text
    assert requeue_expired_leases(fence=standby.fence()) == 3  # the new leader's writes pass
    assert len(_claim(standby)) == 3


@pytest.mark.django_db(transaction=True)
def test_a_takeover_waits_for_a_write_the_old_leader_has_in_progress() -> None:
    old, standby = _leader("old"), _leader("standby")
    assert old.hold()
    _launch(questions=3)
    time.sleep(LEASE + 0.05)  # the lease ran out: a takeover is due
    in_write, done = threading.Event(), threading.Event()
    claimed: list[Any] = []

    def write_slowly() -> None:  # a fenced claim whose transaction stays open a while
        try:
            with transaction.atomic():
                claimed.extend(_claim(old))
                in_write.set()
                done.wait(10)
        finally:
            connection.close()

    writer = threading.Thread(target=write_slowly)
    writer.start()
    assert in_write.wait(10)
    started = time.monotonic()
    assert not standby.hold()  # it waited for the write's lock on the leader row, then gave up
    assert time.monotonic() - started >= 2.5
    done.set()
    writer.join()

    time.sleep(CHECK + 0.05)
    assert standby.hold()  # the write committed first: it was made while `old` led
    assert len(claimed) == 3
    Sample.objects.update(queue_state="ready")
    assert _claim(old) == []  # and from now on `old` writes nothing


@pytest.mark.django_db(transaction=True)
def test_a_leader_that_renews_keeps_the_lease_and_its_epoch() -> None:
    leader, standby = _leader("leader"), _leader("standby")
    stop = threading.Event()
    renewals: list[bool] = []

    def renew() -> None:  # its own thread, its own database connection
        try:
            while not stop.is_set():
                renewals.append(leader.hold())
                time.sleep(LEASE / 5)
        finally:
            connection.close()

    assert leader.hold()
    thread = threading.Thread(target=renew)
    thread.start()
    try:
        deadline = time.monotonic() + 3 * LEASE
        while time.monotonic() < deadline:
            assert not standby.hold()
            time.sleep(CHECK)
    finally:
        stop.set()
        thread.join()
    assert all(renewals) and len(renewals) >= 10
    assert leader.epoch == 1 and LeaderLease.objects.get().holder == "leader"


@pytest.mark.e2e
@pytest.mark.django_db(transaction=True)
def test_a_stopped_dispatcher_process_is_replaced_by_the_standby_which_dispatches(
    tmp_path: Path,
) -> None:
    lease, check = 3.0, 0.5
    env = {
        "DATABASE_URL": database_url(),
        "REDIS_URL": os.environ["REDIS_URL"],
        "GEO_VAR_DIR": str(django_settings.VAR_DIR),
        "GEO_LEADER_LEASE_SECONDS": str(lease),
        "GEO_LEADER_CHECK_SECONDS": str(check),
        "GEO_LOG_LEVEL": "INFO",
    }
    first = _dispatcher("first", env, tmp_path)
    _wait_for(lambda: _holder_pid() == first.pid, timeout=30, what="the first to lead")
    second = _dispatcher("second", env, tmp_path)
    try:
        time.sleep(2 * check)  # the standby is looking
        assert _holder_pid() == first.pid
        os.kill(first.pid, signal.SIGSTOP)
        # Within 30 s of the stop (the bound the product promises; with the defaults, 15 s of
        # lease and a 2 s check). The stopped leader is not resumed before: only its lease
        # running out lets the standby in. How fast is bench/faults.py's to measure.
        _wait_for(lambda: _holder_pid() == second.pid, timeout=30, what="the takeover")
        run = _launch(questions=3)
        _wait_for(
            lambda: (
                Sample.objects.filter(run=run, lease_owner__endswith=f":{second.pid}").count() == 3
            ),
            timeout=30,
            what="the standby's claims",
        )

        os.kill(first.pid, signal.SIGCONT)
        _wait_for(lambda: "leadership lost" in first.text(), timeout=30, what="the old one to stop")
        assert first.alive() and second.alive()
        assert not Sample.objects.filter(lease_owner__endswith=f":{first.pid}").exists()
        assert "leadership taken over" in second.text() and "lease stale for" in second.text()
        assert LeaderLease.objects.get().epoch == 2
    finally:
        os.kill(first.pid, signal.SIGCONT)
        stop_all([first, second], timeout=15)


def _dispatcher(name: str, env: dict[str, str], tmp_path: Path) -> ManagedProcess:
    command = dispatcher_command(interval=0.2)
    return ManagedProcess(name, command, env, tmp_path / f"{name}.log").start()


def _holder_pid() -> int | None:
    holder = LeaderLease.objects.filter(name="dispatcher").values_list("holder", flat=True).first()
    return int(holder.rsplit(":", 1)[1]) if holder else None


def _wait_for(condition: Any, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
