"""The circuit of a platform and egress (pipeline/circuits.py): opened by connection failures
the workers count, held by the dispatcher, probed half-open after its cooldown, closed once the
platform answers. Real PostgreSQL; the dispatcher's ticks claim and publish for real."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.db.models.functions import Now
from django.test.utils import CaptureQueriesContext

from pipeline import circuits
from pipeline.circuits import CircuitGate, cooldown_seconds
from pipeline.dispatch import Dispatcher
from pipeline.models import Circuit, CircuitState
from sampling.models import QueueState, Sample
from tests.conftest import launch_funded, make_campaign_data
from tests.services import empty_broker

pytestmark = pytest.mark.django_db

FAILURES = 3


@pytest.fixture(autouse=True)
def _circuit_settings(settings: Any) -> Iterator[None]:
    settings.GEO_CIRCUIT_FAILURES = FAILURES
    settings.GEO_CIRCUIT_WINDOW_SECONDS = 30
    settings.GEO_CIRCUIT_OPEN_SECONDS = 5
    settings.GEO_CIRCUIT_MAX_OPEN_SECONDS = 60
    settings.GEO_CIRCUIT_PROBES = 1
    settings.GEO_CIRCUIT_REFRESH_SECONDS = 0  # every tick reads the circuits
    settings.GEO_PLATFORM_CONCURRENCY = 4
    circuits.forget_counted()
    circuits.egresses.cache_clear()
    with empty_broker(django_settings.CELERY_BROKER_URL):
        yield
    circuits.forget_counted()
    circuits.egresses.cache_clear()


def _fail(n: int, platform: str = "openai", egress: str = "direct") -> str:
    state = ""
    for _ in range(n):
        state = circuits.unreachable(platform=platform, egress=egress)
    return state


def _circuit(platform: str = "openai", egress: str = "direct") -> Circuit:
    return Circuit.objects.get(platform=platform, egress=egress)


def _cooldown_passed(platform: str = "openai") -> None:
    Circuit.objects.filter(platform=platform).update(retry_at=Now() - timedelta(seconds=1))


def _launch(platform: str, questions: int) -> Any:
    target = {"platform": platform, "device": "desktop", "region": "us", "mode": "web_search"}
    data = make_campaign_data(questions=questions, targets=[target], repeats=1)
    data["screenshot_policy"] = "none"
    return launch_funded(data)


def _leased(platform: str) -> list[Sample]:
    return list(Sample.objects.filter(platform=platform, queue_state=QueueState.LEASED))


def _release(samples: list[Sample]) -> None:
    """What a probe's step does at its end: the sample goes back to the queue (later)."""
    Sample.objects.filter(pk__in=[s.pk for s in samples]).update(
        queue_state=QueueState.READY, lease_until=None, due_at=Now() + timedelta(hours=1)
    )


# --- the state machine ------------------------------------------------------------------------


def test_a_circuit_opens_at_the_threshold_of_connection_failures_not_before() -> None:
    assert _fail(FAILURES - 1) == CircuitState.CLOSED
    assert _fail(1) == CircuitState.OPEN
    circuit = _circuit()
    assert (circuit.failures, circuit.opens) == (FAILURES, 1)
    assert circuit.retry_at is not None and circuit.opened_at is not None
    held = (circuit.retry_at - circuit.opened_at).total_seconds()
    assert held == pytest.approx(cooldown_seconds(1), abs=0.5)


def test_failures_further_apart_than_the_window_start_a_new_count() -> None:
    _fail(FAILURES - 1)
    Circuit.objects.update(window_started_at=Now() - timedelta(seconds=31))

    assert _fail(1) == CircuitState.CLOSED
    assert _circuit().failures == 1


def test_the_cooldown_doubles_with_every_reopening_up_to_the_maximum() -> None:
    assert [cooldown_seconds(n) for n in (1, 2, 3, 4, 5)] == [5, 10, 20, 40, 60]


def test_an_answer_closes_the_circuit_this_process_counted_failures_on() -> None:
    _fail(FAILURES)

    circuits.reached(platform="openai", egress="direct")

    circuit = _circuit()
    assert (circuit.state, circuit.failures, circuit.opens) == (CircuitState.CLOSED, 0, 0)


def test_an_answer_costs_no_statement_where_this_process_counted_no_failure() -> None:
    _fail(FAILURES, platform="anthropic")
    with CaptureQueriesContext(connection) as queries:
        circuits.reached(platform="openai", egress="direct")
    circuits.forget_counted()
    with CaptureQueriesContext(connection) as none_counted:
        circuits.reached(platform="anthropic", egress="direct")

    assert len(queries) == 0
    assert len(none_counted) == 0
    assert _circuit("anthropic").state == CircuitState.OPEN  # another process's count stays


# --- the dispatcher ---------------------------------------------------------------------------


def test_the_dispatcher_claims_nothing_of_a_platform_whose_circuit_is_open() -> None:
    _launch("openai", 6)
    _launch("anthropic", 6)
    _fail(FAILURES)

    report = Dispatcher(owner="t").tick()

    assert _leased("openai") == []
    assert len(_leased("anthropic")) == 4
    assert report.claimed == 4


def test_after_the_cooldown_one_probe_goes_and_an_answer_closes_the_circuit() -> None:
    _launch("openai", 6)
    _fail(FAILURES)
    circuits.forget_counted()  # the probe's worker is another process
    dispatcher = Dispatcher(owner="t")
    dispatcher.tick()
    _cooldown_passed()

    dispatcher.tick()
    probes = _leased("openai")
    dispatcher.tick()  # the probe is still out: nothing else goes

    assert len(probes) == 1
    assert _circuit().state == CircuitState.HALF_OPEN
    assert len(_leased("openai")) == 1

    _release(probes)  # the probe reached the platform, and its step ended
    dispatcher.tick()

    assert _circuit().state == CircuitState.CLOSED
    assert len(_leased("openai")) == 4


def test_a_probe_that_cannot_connect_opens_the_circuit_again_for_longer() -> None:
    _launch("openai", 6)
    _fail(FAILURES)
    dispatcher = Dispatcher(owner="t")
    _cooldown_passed()
    dispatcher.tick()
    probes = _leased("openai")

    assert _fail(1) == CircuitState.OPEN  # the probe's worker counts its failure first
    _release(probes)
    dispatcher.tick()
    dispatcher.tick()

    circuit = _circuit()
    assert (circuit.state, circuit.opens) == (CircuitState.OPEN, 2)
    assert _leased("openai") == []
    assert circuit.retry_at is not None and circuit.opened_at is not None


def test_probes_released_by_another_dispatcher_are_probed_again_once_they_would_be_done(
    settings: Any,
) -> None:
    _launch("openai", 6)
    _fail(FAILURES)
    _cooldown_passed()
    Dispatcher(owner="old").tick()  # released a probe, then stopped
    _release(_leased("openai"))
    gate = CircuitGate()
    gate.begin_tick()
    assert gate.take(platform="openai", step="submit", wanted=4) == 0  # probe may be out

    Circuit.objects.update(probed_at=Now() - timedelta(seconds=settings.GEO_LEASE_SECONDS + 1))
    gate.begin_tick()

    assert gate.take(platform="openai", step="submit", wanted=4) == 1


def test_a_platform_is_held_only_while_every_one_of_its_egresses_is_open(settings: Any) -> None:
    openai = {**settings.GEO_PLATFORMS.get("openai", {}), "EGRESS": "direct,http://10.0.0.2:3128"}
    settings.GEO_PLATFORMS = {**settings.GEO_PLATFORMS, "openai": openai}
    circuits.egresses.cache_clear()
    ways = sorted(circuits.egresses("openai"))
    assert len(ways) == 2
    gate = CircuitGate()

    _fail(FAILURES, egress=ways[0])
    gate.begin_tick()
    one_open = gate.take(platform="openai", step="submit", wanted=4)
    _fail(FAILURES, egress=ways[1])
    gate.begin_tick()
    both_open = gate.take(platform="openai", step="submit", wanted=4)

    assert (one_open, both_open) == (4, 0)
    # Local work of the platform is never held (a direct API's evidence is a rendering).
    assert gate.take(platform="openai", step="analyse", wanted=4) == 4
    assert gate.take(platform="openai", step="evidence", wanted=4) == 4
