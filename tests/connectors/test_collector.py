"""The collection provider adapter against the simulator over real HTTP on 127.0.0.1."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Callable, Iterator

import pytest

from connectors.adapters.collector import (
    SCREENSHOT_UNAVAILABLE,
    CollectorConnector,
    parse_callback,
    verify_callback_signature,
)
from connectors.base import ErrorClass, SubmitOutcome, UpstreamError
from simulator import SimulatorHandle
from simulator.png import png_size
from tests.services import QuietHandler, loopback_server

from .contract import CITED_WORLD, sample

Factory = Callable[..., CollectorConnector]
ScreenshotTask = Callable[[str, str], tuple[CollectorConnector, str]]


def _poll_until_finished(connector: CollectorConnector, task_id: str) -> str:
    for _ in range(10):  # the simulator advances tasks per poll, not per second
        state = connector.poll(task_id).state
        if state not in ("queued", "running"):
            return state
    raise AssertionError("task never finished")


def test_batch_submit_is_idempotent(
    simulator: SimulatorHandle, collector_connector: Factory
) -> None:
    connector = collector_connector()
    requests = [sample("best crm", sample_id=1), sample("best erp", sample_id=2)]
    first = connector.submit_batch(requests)
    again = connector.submit_batch(requests)
    assert all(isinstance(o, SubmitOutcome) for o in first + again)
    assert [o.upstream_id for o in first] == [o.upstream_id for o in again]  # type: ignore[union-attr]
    assert len({o.upstream_id for o in first}) == 2  # type: ignore[union-attr]
    assert simulator.stats()["platforms"]["collector"]["paths"]["POST /v1/batches"] == 2
    assert len(simulator.answers("collector")) == 2  # the replay created nothing


def test_single_submit_uses_the_sample_key_and_returns_no_answer(
    collector_connector: Factory,
) -> None:
    connector = collector_connector()
    outcome = connector.submit(sample("best crm", key="sample-42"))
    assert outcome.result is None  # asynchronous: an acceptance id, never an answer
    assert connector.submit(sample("best crm", key="sample-42")).upstream_id == outcome.upstream_id
    assert outcome.egress == "direct"


def test_poll_to_completion_then_evidence_with_screenshot_and_cost(
    simulator: SimulatorHandle, collector_connector: Factory
) -> None:
    simulator.configure(world=CITED_WORLD, profile={"citation_rate": 1.0})
    connector = collector_connector()
    task_id = connector.submit(sample("best crm", device="mobile", screenshot=True)).upstream_id
    assert connector.poll(task_id).state == "queued"
    assert _poll_until_finished(connector, task_id) == "completed"

    result = connector.fetch_evidence(task_id, sample_id=7)
    intended = simulator.answers("collector")[-1]
    assert result.sample_id == 7 and result.upstream_id == task_id
    assert result.collection_state == "completed"
    assert result.evidence_state == "stored"
    assert result.warnings == []
    assert result.answer_text == intended["answer_text"]
    for citation, expected in zip(result.citations, intended["citations"], strict=True):
        assert result.answer_text[citation.start : citation.end] == expected["cited_text"]
    assert result.cost is not None and 20 <= result.cost <= 60
    assert result.cost_currency == "USD"
    [shot] = result.attachments
    assert (shot.kind, shot.mime) == ("screenshot", "image/png")
    assert png_size(shot.content) == (390, 844)


@pytest.fixture
def screenshot_task(simulator: SimulatorHandle, collector_connector: Factory) -> ScreenshotTask:
    """Scripts a screenshot `fault` for questions with `match`, submits "<match> please" with a
    screenshot asked for and polls the task to completion: the connector and the task id."""

    def run(match: str, fault: str) -> tuple[CollectorConnector, str]:
        simulator.script({"match": match, "fault": fault})
        connector = collector_connector()
        task_id = connector.submit(sample(f"{match} please", screenshot=True)).upstream_id
        assert _poll_until_finished(connector, task_id) == "completed"
        return connector, task_id

    return run


def test_missing_screenshot_is_partial_evidence(screenshot_task: ScreenshotTask) -> None:
    connector, task_id = screenshot_task("no picture", "screenshot_missing")
    result = connector.fetch_evidence(task_id)
    assert result.collection_state == "completed"
    assert result.answer_text  # the answer is still usable
    assert result.evidence_state == "partial"
    assert result.warnings == [SCREENSHOT_UNAVAILABLE]
    assert result.attachments == []


def test_a_late_screenshot_is_there_when_fetched_again(screenshot_task: ScreenshotTask) -> None:
    connector, task_id = screenshot_task("late picture", "screenshot_late")
    assert connector.fetch_evidence(task_id).warnings == [SCREENSHOT_UNAVAILABLE]
    again = connector.fetch_evidence(task_id)
    assert (again.evidence_state, [a.kind for a in again.attachments]) == ("stored", ["screenshot"])


def test_no_screenshot_requested_is_not_partial(collector_connector: Factory) -> None:
    connector = collector_connector()
    task_id = connector.submit(sample("text only")).upstream_id
    _poll_until_finished(connector, task_id)
    result = connector.fetch_evidence(task_id)
    assert (result.evidence_state, result.warnings, result.attachments) == ("stored", [], [])


def test_accept_then_lose(simulator: SimulatorHandle, collector_connector: Factory) -> None:
    simulator.script({"match": "vanish", "fault": "lose"})
    connector = collector_connector()
    outcome = connector.submit(sample("vanish quietly", key="lost-key"))
    assert outcome.upstream_id  # accepted ...
    assert connector.poll(outcome.upstream_id).state == "lost"  # ... then lost
    with pytest.raises(UpstreamError) as caught:
        connector.fetch_evidence(outcome.upstream_id)
    assert caught.value.error_class is ErrorClass.LOST
    assert connector.lookup("lost-key") is None


def test_failed_task(simulator: SimulatorHandle, collector_connector: Factory) -> None:
    simulator.script({"match": "unanswerable", "fault": "task_failed"})
    connector = collector_connector()
    task_id = connector.submit(sample("unanswerable question")).upstream_id
    assert _poll_until_finished(connector, task_id) == "failed"
    result = connector.fetch_evidence(task_id)
    assert result.collection_state == "failed"
    assert result.error is not None and result.error["class"] == "upstream_failed"


def test_lookup_by_key(collector_connector: Factory) -> None:
    connector = collector_connector()
    outcome = connector.submit(sample("find me", key="known-key"))
    assert connector.lookup("known-key") == outcome.upstream_id
    assert connector.lookup("never-submitted") is None


def test_hang_after_accepting_is_resolved_by_lookup(
    simulator: SimulatorHandle, collector_connector: Factory
) -> None:
    simulator.script({"match": "slow accept", "fault": "hang", "params": {"hang_seconds": 3}})
    connector = collector_connector(timeout_seconds=0.3)
    with pytest.raises(UpstreamError) as caught:
        connector.submit(sample("slow accept", key="uncertain-key"))
    assert caught.value.error_class is ErrorClass.ACCEPTANCE_UNKNOWN
    assert connector.lookup("uncertain-key") is not None  # it was accepted after all


def test_cancel(collector_connector: Factory) -> None:
    connector = collector_connector()
    pending = connector.submit(sample("cancel me")).upstream_id
    assert connector.cancel(pending) is True
    polled = connector.poll(pending)
    assert (polled.state, polled.message) == ("failed", "the task was cancelled upstream")
    assert connector.cancel("tsk_unknown") is False  # 404: nothing left to stop

    finished = connector.submit(sample("too late to cancel")).upstream_id
    _poll_until_finished(connector, finished)
    assert connector.cancel(finished) is False


def test_a_cancel_that_cannot_reach_the_provider_raises(collector_connector: Factory) -> None:
    """The caller counts it against the circuit and records why (pipeline/upstream_cancel.py)."""
    connector = collector_connector(base_url="http://127.0.0.1:9")
    with pytest.raises(UpstreamError) as caught:
        connector.cancel("tsk_any")
    assert caught.value.error_class is ErrorClass.UNREACHABLE


def test_a_batch_accepted_in_part_gives_each_task_its_own_outcome(
    simulator: SimulatorHandle, collector_connector: Factory
) -> None:
    simulator.script({"match": "no capacity", "fault": "task_rejected", "times": 1})
    requests = [sample("best crm", sample_id=1), sample("no capacity here", sample_id=2)]

    accepted, refused = collector_connector().submit_batch(requests)

    assert isinstance(accepted, SubmitOutcome) and accepted.upstream_id
    assert isinstance(refused, UpstreamError)
    assert refused.error_class is ErrorClass.UNSUPPORTED
    assert refused.message.startswith("region_unavailable")


def test_batch_over_the_limit_is_rejected_before_sending(
    simulator: SimulatorHandle, collector_connector: Factory
) -> None:
    requests = [sample(f"q{i}", sample_id=i) for i in range(101)]
    with pytest.raises(UpstreamError) as caught:
        collector_connector().submit_batch(requests)
    assert caught.value.error_class is ErrorClass.INVALID
    assert "collector" not in simulator.stats()["platforms"]


def test_rate_limited_batch(simulator: SimulatorHandle, collector_connector: Factory) -> None:
    simulator.script(
        {"match": "crowded", "fault": "rate_limit", "params": {"retry_after_seconds": 4}}
    )
    with pytest.raises(UpstreamError) as caught:
        collector_connector().submit(sample("crowded"))
    assert caught.value.error_class is ErrorClass.RATE_LIMITED
    assert caught.value.retry_after == 4.0


def test_quote(collector_connector: Factory) -> None:
    quote = collector_connector().quote(
        [sample("a", screenshot=True), sample("b", mode="deep_thinking")]
    )
    assert quote.unit_costs == (40, 50)
    assert quote.total == 90
    assert quote.currency == "USD"


def _signature(body: bytes, secret: str, timestamp: int) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def test_callback_signature_verification() -> None:
    body = b'{"delivery_id":"d1","task_id":"t1","status":"completed"}'
    header = _signature(body, "s3cret", 1_700_000_000)
    assert verify_callback_signature(body, header, "s3cret", now=1_700_000_010)
    assert not verify_callback_signature(body + b" ", header, "s3cret", now=1_700_000_010)
    assert not verify_callback_signature(body, header, "other", now=1_700_000_010)
    assert not verify_callback_signature(body, header, "s3cret", now=1_700_009_999)  # replay
    assert not verify_callback_signature(body, "v1=deadbeef", "s3cret", now=1_700_000_010)
    rotated = header + ",v1=" + "0" * 64
    assert verify_callback_signature(body, rotated, "s3cret", now=1_700_000_010)


class _Receiver(QuietHandler):
    received: list[tuple[bytes, str]]
    arrived: threading.Semaphore
    url: str  # where the collector is told to call back

    def do_POST(self) -> None:
        self.received.append((self.read_body(), self.headers["X-Collector-Signature"]))
        self.reply(204)
        self.arrived.release()


@pytest.fixture
def callback_receiver() -> Iterator[type[_Receiver]]:
    handler = type("Receiver", (_Receiver,), {"received": [], "arrived": threading.Semaphore(0)})
    with loopback_server(handler) as url:
        handler.url = f"{url}/hooks/collector"
        yield handler


def test_duplicate_signed_callbacks(
    simulator: SimulatorHandle,
    collector_connector: Factory,
    callback_receiver: type[_Receiver],
) -> None:
    receiver = callback_receiver
    simulator.script({"match": "twice", "fault": "duplicate_callback"})
    connector = collector_connector(extra={"callback_url": receiver.url})
    task_id = connector.submit(sample("call me twice")).upstream_id

    assert receiver.arrived.acquire(timeout=10) and receiver.arrived.acquire(timeout=10)
    events = [parse_callback(body) for body, _ in receiver.received]
    assert [e.task_id for e in events] == [task_id, task_id]
    assert events[0].delivery_id == events[1].delivery_id  # receivers dedupe on this
    assert all(
        verify_callback_signature(body, header, "sim-callback-secret")
        for body, header in receiver.received
    )
    assert connector.poll(task_id).state == "completed"
    assert json.loads(receiver.received[0][0])["status"] == "completed"
