"""The Volcengine Ark (Doubao) adapter against the simulator over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Callable

import requests

from connectors.adapters.doubao import RESPONSES_PATH, DoubaoConnector
from connectors.base import ErrorClass
from simulator import SimulatorHandle

from .contract import POLICY, responses_json, sample

Factory = Callable[..., DoubaoConnector]
BOT = {"bot_id": "bot-20261111-test"}


def test_quota_exceeded_429_is_auth_not_rate_limited() -> None:
    body = json.dumps(
        {"error": {"code": "QuotaExceeded", "message": "free quota used up", "type": "x"}}
    ).encode()
    error = DoubaoConnector._http_error(429, {"X-Request-Id": "rid"}, body, "direct")
    assert error.error_class is ErrorClass.AUTH and error.request_id == "rid"
    assert not POLICY.decide(error, attempt_no=1, elapsed_seconds=0).retry


def test_simulator_validates_requests(simulator: SimulatorHandle) -> None:
    url = f"{simulator.url('doubao')}{RESPONSES_PATH}"
    auth = {"Authorization": "Bearer k"}
    no_key = requests.post(url, json={"model": "m", "input": "q"}, timeout=5)
    assert no_key.status_code == 401
    assert no_key.json()["error"]["code"] == "AuthenticationError"
    no_input = requests.post(url, json={"model": "m"}, headers=auth, timeout=5)
    assert no_input.status_code == 400
    assert no_input.json()["error"]["code"] == "MissingParameter"
    bad_thinking = {"model": "m", "input": "q", "thinking": {"type": "sometimes"}}
    assert requests.post(url, json=bad_thinking, headers=auth, timeout=5).status_code == 400
    bots = f"{simulator.url('doubao')}/api/v3/bots/chat/completions"
    not_a_bot = {"model": "doubao-x", "messages": [{"role": "user", "content": "q"}]}
    response = requests.post(bots, json=not_a_bot, headers=auth, timeout=5)
    assert response.status_code == 404
    error = DoubaoConnector._http_error(404, dict(response.headers), response.content, "direct")
    assert error.error_class is ErrorClass.INVALID


def test_request_body_per_mode_and_surface(doubao_connector: Factory) -> None:
    connector = doubao_connector()
    web = connector.request_body(sample("q", region="cn"))
    assert web["model"] == "doubao-test" and web["stream"] is True
    assert web["tools"] == [{"type": "web_search"}]
    assert web["thinking"] == {"type": "disabled"}
    assert "tools" not in connector.request_body(sample("q", mode="no_search"))
    thinking = connector.request_body(sample("q", mode="deep_thinking"))
    assert thinking["thinking"] == {"type": "enabled"} and thinking["tools"]
    bot = doubao_connector(extra=BOT).request_body(sample("q"))
    assert bot["model"] == BOT["bot_id"]
    assert bot["messages"] == [{"role": "user", "content": "q"}]
    assert bot["stream_options"] == {"include_usage": True}


def test_capabilities_depend_on_the_surface(doubao_connector: Factory) -> None:
    responses = doubao_connector().capabilities()
    assert responses.modes == {"web_search", "no_search", "deep_thinking"}
    assert not responses.screenshots and not responses.asynchronous
    assert not responses.supports_lookup
    bot = doubao_connector(extra=BOT).capabilities()
    assert bot.problems(device="api", region="cn", mode="no_search", screenshot_policy="none")
    assert responses.problems(
        device="api", region="us", mode="web_search", screenshot_policy="none"
    )


def test_failed_and_incomplete_json_bodies() -> None:
    failed = responses_json(
        "resp_1", "failed", error={"code": "ServerOverloaded", "message": "busy"}
    )
    result = DoubaoConnector.parse(failed, content_type="application/json")
    assert result.collection_state == "failed" and result.upstream_id == "resp_1"
    assert result.error is not None and result.error["class"] == "rate_limited"
    incomplete = responses_json(
        "resp_2", "incomplete", incomplete_details={"reason": "max_output_tokens"}
    )
    result = DoubaoConnector.parse(incomplete, content_type="application/json")
    assert result.error is not None and result.error["class"] == "upstream_failed"


def test_annotation_type_annotation_is_accepted_and_kb_references_skipped() -> None:
    stream = (
        b'event: response.output_text.delta\ndata: {"type": "response.output_text.delta", '
        b'"output_index": 0, "content_index": 0, "delta": "Acme."}\n\n'
        b'event: response.output_text.annotation.added\ndata: {"type": '
        b'"response.output_text.annotation.added", "output_index": 0, "content_index": 0, '
        b'"annotation": {"type": "annotation", "url": "https://a.example/?utm_source=x", '
        b'"title": "A"}}\n\n'
        b'event: response.completed\ndata: {"type": "response.completed", '
        b'"response": {"id": "resp_3", "status": "completed"}}\n\n'
    )
    result = DoubaoConnector.parse(stream)
    assert result.collection_state == "completed" and result.answer_text == "Acme."
    assert [(c.normalized_url, c.title, c.start) for c in result.citations] == [
        ("https://a.example/", "A", None)
    ]
    bots = json.dumps(
        {"id": "b1", "choices": [{"index": 0, "message": {"content": "x"},
         "finish_reason": "stop"}], "references": [{"doc_id": "d1", "doc_name": "kb"},
         {"url": "https://b.example/", "title": "B"}]}
    ).encode()  # fmt: skip
    result = DoubaoConnector.parse(bots, content_type="application/json")
    assert [c.url for c in result.citations] == ["https://b.example/"]
