"""The Ollama adapter against the simulator over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from connectors.adapters.ollama import PATH, OllamaConnector
from connectors.base import ErrorClass, UpstreamError
from connectors.retry import REVIEW, VERIFY
from connectors.simulator import SimulatorHandle

from .conftest import CITED_WORLD, sample
from .contract import POLICY, comparable

Factory = Callable[..., OllamaConnector]
FIXTURES = Path(__file__).parent / "fixtures" / "ollama"


def _world(simulator: SimulatorHandle) -> None:
    simulator.configure(world=CITED_WORLD, profile={"emoji_rate": 1.0, "cjk_rate": 1.0})


def _intended(simulator: SimulatorHandle) -> dict[str, Any]:
    return simulator.answers("ollama")[-1]


@pytest.mark.parametrize(
    "question", ["Which cloud provider is best for startups?", "哪家云服务最适合初创公司？"]
)
def test_streamed_answer_including_cjk_and_emoji_without_citations(
    simulator: SimulatorHandle, ollama_connector: Factory, question: str
) -> None:
    _world(simulator)
    outcome = ollama_connector().submit(sample(question, mode="no_search"))
    result = outcome.result
    assert result is not None
    assert result.collection_state == "completed" and result.error is None
    assert result.answer_text == _intended(simulator)["answer_text"]
    assert any(ord(ch) > 0xFFFF for ch in result.answer_text)
    assert result.citations == []
    assert result.raw_mime.startswith("application/x-ndjson")
    assert result.raw.rstrip(b"\n").rsplit(b"\n", 1)[-1].startswith(b'{"model"')
    # No request id and no response id exist: the idempotency key names the attempt.
    assert outcome.request_id is None and result.request_id is None
    assert outcome.upstream_id == f"noid:key-1-{question}"


def test_reparse_of_the_captured_transcript_equals_the_live_result(
    simulator: SimulatorHandle, ollama_connector: Factory
) -> None:
    _world(simulator)
    live = ollama_connector().submit(sample("emoji please", mode="no_search")).result
    assert live is not None
    again = OllamaConnector.parse(live.raw, content_type=live.raw_mime, sample_id=1)
    again.status_code = live.status_code
    assert comparable(again) == comparable(live)
    assert OllamaConnector.parse(live.raw).answer_text == live.answer_text  # no content type


def test_non_streaming_json_body_parses_the_same(
    simulator: SimulatorHandle, ollama_connector: Factory
) -> None:
    connector = ollama_connector()
    body = connector.request_body(sample("json please", mode="no_search")) | {"stream": False}
    response = requests.post(f"{simulator.url('ollama')}{PATH}", json=body, timeout=5)
    assert response.headers["content-type"].startswith("application/json")
    result = OllamaConnector.parse(response.content, content_type=response.headers["content-type"])
    assert result.collection_state == "completed"
    assert result.answer_text == _intended(simulator)["answer_text"]
    pretty = json.dumps(response.json(), indent=2).encode()  # one object over many lines
    assert OllamaConnector.parse(pretty, content_type="application/json").answer_text == (
        result.answer_text
    )


@pytest.mark.parametrize("cut_line", [False, True])
def test_truncated_stream_is_truncated_not_a_short_answer(
    simulator: SimulatorHandle, ollama_connector: Factory, cut_line: bool
) -> None:
    simulator.script({"match": "cut me", "fault": "truncate", "params": {"cut_line": cut_line}})
    result = ollama_connector().submit(sample("please cut me off", mode="no_search")).result
    assert result is not None
    assert result.collection_state == "truncated" and result.evidence_state == "partial"
    assert result.error is not None and result.error["class"] == "truncated"
    assert b'"done": true' not in result.raw
    assert result.raw.endswith(b"\n") is not cut_line
    assert ("last line cut" in result.error["message"]) is cut_line


def test_mid_stream_error_line_fails_the_answer(
    simulator: SimulatorHandle, ollama_connector: Factory
) -> None:
    simulator.script({"match": "break", "fault": "midstream_error"})
    result = ollama_connector().submit(sample("break in the middle", mode="no_search")).result
    assert result is not None
    assert result.collection_state == "failed"
    assert result.error is not None
    # A bare string with no code: the upstream gave up, nothing says a retry helps.
    assert result.error["class"] == ErrorClass.UPSTREAM_FAILED.value
    assert "unexpected EOF" in result.error["message"]
    assert result.raw.rstrip().endswith(b'"}') and b'{"error"' in result.raw


def test_429_is_rate_limited_and_retried_with_backoff(
    simulator: SimulatorHandle, ollama_connector: Factory
) -> None:
    simulator.script({"match": "busy", "fault": "rate_limit", "times": 1})
    connector = ollama_connector()
    with pytest.raises(UpstreamError) as caught:
        connector.submit(sample("busy hour", mode="no_search"))
    error = caught.value
    assert error.error_class is ErrorClass.RATE_LIMITED and error.status_code == 429
    assert error.retry_after is None and error.request_id is None  # Ollama sends neither
    assert error.message == "too many requests, please try again later"
    decision = POLICY.decide(error, attempt_no=1, elapsed_seconds=0, rng=random.Random(0))
    assert decision.retry
    retried = connector.submit(sample("busy hour", mode="no_search"), attempt_no=2)
    assert retried.result is not None and retried.result.collection_state == "completed"


@pytest.mark.parametrize(("fault", "status"), [("server_error", 500), ("overloaded", 503)])
def test_5xx_is_transient_and_retried(
    simulator: SimulatorHandle, ollama_connector: Factory, fault: str, status: int
) -> None:
    simulator.script({"match": "flaky", "fault": fault})
    with pytest.raises(UpstreamError) as caught:
        ollama_connector().submit(sample("flaky upstream", mode="no_search"))
    assert caught.value.error_class is ErrorClass.TRANSIENT
    assert caught.value.status_code == status
    assert POLICY.decide(caught.value, attempt_no=1, elapsed_seconds=0).retry


@pytest.mark.parametrize(("params", "status"), [({}, 401), ({"status": 403}, 403)])
def test_401_and_403_are_auth_and_not_retried(
    simulator: SimulatorHandle, ollama_connector: Factory, params: dict[str, int], status: int
) -> None:
    simulator.script({"match": "who", "fault": "auth_error", "params": params})
    with pytest.raises(UpstreamError) as caught:
        ollama_connector(api_key="cloud-key").submit(sample("who am i", mode="no_search"))
    assert caught.value.error_class is ErrorClass.AUTH and caught.value.status_code == status
    assert not POLICY.decide(caught.value, attempt_no=1, elapsed_seconds=0).retry


def test_bearer_is_sent_only_when_a_key_is_configured(
    simulator: SimulatorHandle, ollama_connector: Factory
) -> None:
    # Locally there is no auth: no key, no header, and the call succeeds.
    result = ollama_connector(api_key="").submit(sample("local", mode="no_search")).result
    assert result is not None and result.collection_state == "completed"
    with pytest.raises(UpstreamError) as caught:
        ollama_connector(api_key="invalid-cloud-key").submit(sample("cloud", mode="no_search"))
    assert caught.value.error_class is ErrorClass.AUTH
    assert "invalid-cloud-key" not in str(caught.value)


def test_simulator_validates_requests(simulator: SimulatorHandle) -> None:
    url = f"{simulator.url('ollama')}{PATH}"
    missing = requests.post(url, json={"messages": []}, timeout=5)
    assert missing.status_code == 400 and missing.json() == {"error": "model is required"}
    error = OllamaConnector._http_error(400, dict(missing.headers), missing.content, "direct")
    assert error.error_class is ErrorClass.INVALID and error.message == "model is required"
    assert requests.get(f"{simulator.url('ollama')}/api/nothing", timeout=5).status_code == 404


def test_error_page_with_200_is_a_parse_failure_sent_to_review(
    simulator: SimulatorHandle, ollama_connector: Factory
) -> None:
    simulator.script({"match": "proxy", "fault": "error_page"})
    result = ollama_connector().submit(sample("proxy in the way", mode="no_search")).result
    assert result is not None
    assert result.collection_state == "failed"
    assert result.error is not None and result.error["class"] == "parse_failed"
    assert POLICY.decide(ErrorClass.PARSE_FAILED, attempt_no=1, elapsed_seconds=0).action == REVIEW


def test_hang_past_the_timeout_is_acceptance_unknown(
    simulator: SimulatorHandle, ollama_connector: Factory
) -> None:
    simulator.script({"match": "hang", "fault": "hang", "params": {"hang_seconds": 3}})
    with pytest.raises(UpstreamError) as caught:
        ollama_connector(timeout_seconds=0.3).submit(sample("hang forever", mode="no_search"))
    assert caught.value.error_class is ErrorClass.ACCEPTANCE_UNKNOWN
    assert POLICY.decide(caught.value, attempt_no=1, elapsed_seconds=0).action == VERIFY


def test_deep_thinking_only_when_configured_and_thinking_is_not_the_answer(
    simulator: SimulatorHandle, ollama_connector: Factory
) -> None:
    plain = ollama_connector().capabilities()
    assert plain.modes == {"no_search"}
    assert plain.problems(device="api", region="us", mode="web_search", screenshot_policy="none")
    thinking = ollama_connector(extra={"thinking": True})
    assert thinking.capabilities().modes == {"no_search", "deep_thinking"}
    assert thinking.request_body(sample("q", mode="deep_thinking"))["think"] is True
    assert "think" not in thinking.request_body(sample("q", mode="no_search"))
    result = thinking.submit(sample("think first", mode="deep_thinking")).result
    assert result is not None and result.collection_state == "completed"
    assert b'"thinking"' in result.raw
    assert result.answer_text == _intended(simulator)["answer_text"]


def test_done_reason_length_is_not_a_completed_answer() -> None:
    raw = (
        b'{"model":"m","message":{"role":"assistant","content":"Acme is"},"done":false}\n'
        b'{"model":"m","message":{"role":"assistant","content":""},"done":true,'
        b'"done_reason":"length"}\n'
    )
    result = OllamaConnector.parse(raw, content_type="application/x-ndjson")
    assert result.collection_state == "failed" and result.answer_text == "Acme is"
    assert result.error is not None and result.error["class"] == "upstream_failed"


@pytest.mark.parametrize(
    ("name", "mime"),
    [("success.ndjson", "application/x-ndjson"), ("nonstream.json", "application/json")],
)
def test_fixture_parses_to_the_reviewed_expected_json(name: str, mime: str) -> None:
    raw = (FIXTURES / name).read_bytes()
    expected = json.loads((FIXTURES / f"{name.split('.')[0]}.expected.json").read_text("utf-8"))
    data = comparable(OllamaConnector.parse(raw, content_type=mime))
    assert data.pop("raw") == raw.decode("utf-8")
    assert data == expected


def test_truncated_fixture_is_truncated() -> None:
    raw = (FIXTURES / "truncated.ndjson").read_bytes()
    result = OllamaConnector.parse(raw)
    assert result.collection_state == "truncated"
    assert result.error is not None and result.error["class"] == "truncated"
    assert result.raw == raw
