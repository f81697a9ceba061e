"""Real processes: a Celery worker subprocess on Redis, the simulator over HTTP, PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings

from billing.selectors import run_billing
from geo_collect.processes import start_worker, stop_worker
from sampling.models import OutboxMessage
from sampling.selectors import Status, run_status
from simulator.core import SimulatorHandle
from tests.dispatching import tick_until
from tests.services import broker_url, database_url, empty_broker, simulator_fixture


@pytest.fixture
def broker() -> Iterator[str]:
    url = broker_url("end-to-end tests")
    with empty_broker(url):
        yield url


simulator = simulator_fixture(seed=11)


@pytest.fixture
def worker_env(broker: str, simulator: SimulatorHandle, tmp_path: Any) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url(),
        "REDIS_URL": broker,
        "GEO_UPSTREAM_BASE_URL": simulator.base_url,
        "GEO_VAR_DIR": str(settings.VAR_DIR),
        "GEO_MAX_SUBMIT_ATTEMPTS": "3",
    }


@pytest.fixture
def celery_worker(worker_env: dict[str, str], tmp_path: Any) -> Iterator[Callable[..., Any]]:
    started: list[Any] = []

    def start(**kwargs: Any) -> Any:
        process = start_worker(env=worker_env, log_path=tmp_path / "worker.log", **kwargs)
        started.append(process)
        return process

    yield start
    for process in started:
        stop_worker(process)


def drive_until_finished(run_id: Any, *, timeout: float = 180.0) -> Status:
    """The dispatcher loop, in the test process, until the run is finished."""

    def finished() -> Status | None:
        status = run_status(run_id=run_id)
        return status if status.finished else None

    return tick_until(
        finished, timeout=timeout, describe=lambda: str(run_status(run_id=run_id).as_dict())
    )


def drive_until_settled(run_id: Any, *, timeout: float = 180.0) -> Status:
    """Until the run is finished and its run-finished event has settled its money: the
    dispatcher relays the event and a worker settles it after the run's end, so a run can be
    finished while its last settlement is still on the way."""
    status = drive_until_finished(run_id, timeout=timeout)
    tick_until(lambda: _settled(run_id))
    return status


def _settled(run_id: Any) -> bool:
    relayed = OutboxMessage.objects.filter(
        dedupe_key=f"run-finished:{run_id}", sent_at__isnull=False
    ).exists()
    return relayed and run_billing(run_id=run_id).awaiting_samples == 0
