"""The Ollama adapter against the simulator over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import requests

from connectors.adapters.ollama import PATH, OllamaConnector
from connectors.base import ErrorClass, UpstreamError
from simulator import SimulatorHandle

from .contract import sample

Factory = Callable[..., OllamaConnector]


def _intended(simulator: SimulatorHandle) -> dict[str, Any]:
    return simulator.answers("ollama")[-1]


def test_the_answer_streams_as_ndjson_lines(
    simulator: SimulatorHandle, ollama_connector: Factory
) -> None:
    result = ollama_connector().submit(sample("ndjson please", mode="no_search")).result
    assert result is not None and result.raw_mime.startswith("application/x-ndjson")
    assert result.raw.rstrip(b"\n").rsplit(b"\n", 1)[-1].startswith(b'{"model"')


def test_429_says_why_in_a_bare_error_string(
    simulator: SimulatorHandle, ollama_connector: Factory
) -> None:
    simulator.script({"match": "busy", "fault": "rate_limit"})
    with pytest.raises(UpstreamError) as caught:
        ollama_connector().submit(sample("busy hour", mode="no_search"))
    assert caught.value.message == "too many requests, please try again later"


def test_a_pretty_printed_json_body_parses(
    simulator: SimulatorHandle, ollama_connector: Factory
) -> None:
    body = ollama_connector().request_body(sample("json please", mode="no_search"))
    response = requests.post(f"{simulator.url('ollama')}{PATH}", json=body | {"stream": False},
                             timeout=5)  # fmt: skip
    pretty = json.dumps(response.json(), indent=2).encode()  # one object over many lines
    result = OllamaConnector.parse(pretty, content_type="application/json")
    assert result.answer_text == _intended(simulator)["answer_text"]


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


def test_a_mid_stream_error_is_the_last_line(
    simulator: SimulatorHandle, ollama_connector: Factory
) -> None:
    simulator.script({"match": "break", "fault": "midstream_error"})
    result = ollama_connector().submit(sample("break in the middle", mode="no_search")).result
    assert result is not None and result.raw.rstrip().endswith(b'"}')


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
