"""The Anthropic Messages adapter against the simulator over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import requests

from connectors.adapters.anthropic import AnthropicConnector
from simulator import SimulatorHandle

from .contract import cite_everything, sample, upstream_error

Factory = Callable[..., AnthropicConnector]
HEADERS = {"x-api-key": "k", "anthropic-version": "2023-06-01"}


def _intended(simulator: SimulatorHandle) -> dict[str, Any]:
    return simulator.answers("anthropic")[-1]


def test_an_error_body_names_the_request_id_of_the_header(
    simulator: SimulatorHandle, anthropic_connector: Factory
) -> None:
    simulator.script({"match": "busy", "fault": "rate_limit"})
    error = upstream_error(lambda: anthropic_connector().submit(sample("busy hour")))
    assert json.loads(error.raw or b"")["request_id"] == error.request_id


def test_deep_thinking_blocks_are_not_answer_text(
    simulator: SimulatorHandle, anthropic_connector: Factory
) -> None:
    cite_everything(simulator)
    connector = anthropic_connector()
    body = connector.request_body(sample("think hard", mode="deep_thinking"))
    assert body["thinking"]["type"] == "enabled"
    assert body["max_tokens"] > body["thinking"]["budget_tokens"] >= 1024
    result = connector.submit(sample("think hard", mode="deep_thinking")).result
    assert result is not None and result.collection_state == "completed"
    assert b"thinking_delta" in result.raw
    assert b"event: ping" in result.raw  # keep-alives were there and were ignored
    assert result.answer_text == _intended(simulator)["answer_text"]


def test_request_body_per_mode(anthropic_connector: Factory) -> None:
    connector = anthropic_connector()
    web = connector.request_body(sample("q", region="jp"))
    assert web["model"] == "claude-test" and web["stream"] is True
    assert web["messages"] == [{"role": "user", "content": "q"}]
    assert web["tools"][0]["type"] == "web_search_20250305"
    assert web["tools"][0]["name"] == "web_search"
    assert web["tools"][0]["user_location"] == {"type": "approximate", "country": "JP"}
    assert "tools" not in connector.request_body(sample("q", mode="no_search"))


def test_capabilities(anthropic_connector: Factory) -> None:
    capabilities = anthropic_connector().capabilities()
    assert capabilities.modes == {"web_search", "no_search", "deep_thinking"}
    assert not capabilities.screenshots and not capabilities.asynchronous
    assert not capabilities.supports_lookup
    assert capabilities.problems(device="api", region="us", mode="web_search",
                                 screenshot_policy="none") == []  # fmt: skip


@pytest.mark.parametrize(
    ("headers", "body", "status", "kind"),
    [
        ({"anthropic-version": "2023-06-01"}, {"model": "m"}, 401, "authentication_error"),
        ({"x-api-key": "k"}, {"model": "m", "max_tokens": 5, "messages": [{}]}, 400,
         "invalid_request_error"),
        (HEADERS, {"model": "m", "messages": [{"role": "user", "content": "q"}]}, 400,
         "invalid_request_error"),
    ],
)  # fmt: skip
def test_simulator_validates_like_the_api(
    simulator: SimulatorHandle,
    headers: dict[str, str],
    body: dict[str, Any],
    status: int,
    kind: str,
) -> None:
    response = requests.post(
        f"{simulator.url('anthropic')}/v1/messages", json=body, headers=headers, timeout=5
    )
    assert response.status_code == status
    payload = response.json()
    assert payload["type"] == "error" and payload["error"]["type"] == kind
    assert payload["request_id"].startswith("req_")


def test_in_band_search_error_and_pause_turn() -> None:
    body = {
        "id": "msg_1", "type": "message", "role": "assistant", "stop_reason": "pause_turn",
        "content": [
            {"type": "text", "text": "Let me look."},
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
             "input": {"query": "q"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
             "content": {"type": "web_search_tool_result_error",
                         "error_code": "max_uses_exceeded"}},
        ],
    }  # fmt: skip
    result = AnthropicConnector.parse(json.dumps(body).encode(), content_type="application/json")
    assert result.answer_text == "Let me look."
    assert "WEB_SEARCH_ERROR:max_uses_exceeded" in result.warnings
    assert result.collection_state == "truncated"  # the server loop paused mid-answer
    assert result.error is not None and result.error["class"] == "truncated"


def test_citations_in_content_block_start_and_multiple_per_block() -> None:
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"message": {"id": "msg_2", "content": []}}),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": "Hi. "}}),
        ("content_block_stop", {"index": 0}),
        ("content_block_start", {"index": 1, "content_block": {"type": "text", "text": "云 🚀",
         "citations": [{"type": "web_search_result_location", "url": "https://a.example/x",
                        "title": "A", "cited_text": "source text"}]}}),
        ("content_block_delta", {"index": 1, "delta": {"type": "citations_delta", "citation":
         {"type": "web_search_result_location", "url": "https://b.example/?utm_source=x",
          "title": "B", "cited_text": "other"}}}),
        ("content_block_delta", {"index": 1, "delta": {"type": "text_delta", "text": " ok."}}),
        ("content_block_stop", {"index": 1}),
        ("ping", {}),
        ("message_delta", {"delta": {"stop_reason": "max_tokens"}}),
        ("message_stop", {}),
    ]  # fmt: skip
    raw = "".join(
        f"event: {name}\ndata: {json.dumps({'type': name} | payload)}\n\n"
        for name, payload in events
    ).encode()
    result = AnthropicConnector.parse(raw)
    assert result.collection_state == "completed"
    assert result.answer_text == "Hi. 云 🚀 ok."
    assert [(c.url, c.start, c.end) for c in result.citations] == [
        ("https://a.example/x", 4, 11),
        ("https://b.example/?utm_source=x", 4, 11),
    ]
    assert result.citations[1].normalized_url == "https://b.example/"
    assert result.warnings == ["MAX_TOKENS"]
