"""The Anthropic Messages adapter against the simulator over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from connectors.adapters.anthropic import AnthropicConnector
from connectors.base import ErrorClass, UpstreamError
from connectors.retry import REVIEW, VERIFY
from connectors.simulator import SimulatorHandle

from .conftest import CITED_WORLD, sample
from .contract import POLICY, cite_everything, comparable

Factory = Callable[..., AnthropicConnector]
FIXTURES = Path(__file__).parent / "fixtures" / "anthropic"
HEADERS = {"x-api-key": "k", "anthropic-version": "2023-06-01"}


def _intended(simulator: SimulatorHandle) -> dict[str, Any]:
    return simulator.answers("anthropic")[-1]


@pytest.mark.parametrize(
    "question",
    ["Which cloud provider is best for startups?", "哪家云服务最适合初创公司？"],
)
def test_citations_span_their_text_blocks_including_cjk_and_emoji(
    simulator: SimulatorHandle, anthropic_connector: Factory, question: str
) -> None:
    cite_everything(simulator)
    result = anthropic_connector().submit(sample(question)).result
    intended = _intended(simulator)

    assert result is not None
    assert result.collection_state == "completed"
    assert result.error is None and result.warnings == []
    assert result.answer_text == intended["answer_text"]  # preamble + every text block
    assert any(ord(ch) > 0xFFFF for ch in result.answer_text)  # emoji outside the BMP
    assert len(result.citations) == len(intended["citations"]) >= 4
    for citation, expected in zip(result.citations, intended["citations"], strict=True):
        assert citation.url == expected["url"]
        assert citation.title == expected["title"]
        assert result.answer_text[citation.start : citation.end] == expected["cited_text"]
        assert "utm_" not in citation.normalized_url
    assert b"event: ping" in result.raw  # keep-alives were there and were ignored


def test_submit_records_ids_and_egress(
    simulator: SimulatorHandle, anthropic_connector: Factory
) -> None:
    outcome = anthropic_connector().submit(sample("best crm"))
    intended = _intended(simulator)
    assert outcome.upstream_id == intended["upstream_id"]
    assert outcome.upstream_id.startswith("msg_")
    assert outcome.request_id == intended["request_id"]  # the `request-id` header
    assert outcome.request_id is not None and outcome.request_id.startswith("req_")
    assert outcome.result is not None and outcome.result.request_id == outcome.request_id
    assert outcome.egress == "direct"
    assert outcome.result.sample_id == 1 and outcome.result.status_code == 200


def test_reparse_of_the_captured_transcript_equals_the_live_result(
    simulator: SimulatorHandle, anthropic_connector: Factory
) -> None:
    cite_everything(simulator)
    live = anthropic_connector().submit(sample("emoji and offsets")).result
    assert live is not None
    assert live.raw.startswith(b"event: message_start")
    again = AnthropicConnector.parse(live.raw, content_type=live.raw_mime, sample_id=1)
    # status and request id come from the HTTP envelope, which a transcript does not hold
    assert comparable(again, "status_code", "request_id") == comparable(
        live, "status_code", "request_id"
    )
    sniffed = AnthropicConnector.parse(live.raw, sample_id=1)  # no content type: sniffed SSE
    assert comparable(sniffed, "status_code", "request_id") == comparable(
        live, "status_code", "request_id"
    )


def test_non_streaming_json_body_parses_the_same(
    simulator: SimulatorHandle, anthropic_connector: Factory
) -> None:
    cite_everything(simulator)
    body = anthropic_connector().request_body(sample("json please")) | {"stream": False}
    response = requests.post(
        f"{simulator.url('anthropic')}/v1/messages", json=body, headers=HEADERS, timeout=5
    )
    assert response.headers["request-id"].startswith("req_")
    result = AnthropicConnector.parse(
        response.content, content_type=response.headers["content-type"]
    )
    intended = _intended(simulator)
    assert result.collection_state == "completed"
    assert result.upstream_id == intended["upstream_id"]
    assert result.answer_text == intended["answer_text"]
    assert [result.answer_text[c.start : c.end] for c in result.citations] == [
        c["cited_text"] for c in intended["citations"]
    ]


def test_truncated_stream_is_truncated_not_a_short_answer(
    simulator: SimulatorHandle, anthropic_connector: Factory
) -> None:
    simulator.script({"match": "cut me", "fault": "truncate"})
    result = anthropic_connector().submit(sample("please cut me off")).result
    assert result is not None
    assert result.collection_state == "truncated" and result.evidence_state == "partial"
    assert result.error is not None and result.error["class"] == "truncated"
    assert b"event: message_start" in result.raw
    assert b"message_stop" not in result.raw
    assert result.upstream_id is not None and result.upstream_id.startswith("msg_")


def test_stream_stalling_after_the_cut_keeps_the_partial_transcript(
    simulator: SimulatorHandle, anthropic_connector: Factory
) -> None:
    simulator.script({"match": "stall", "fault": "truncate", "params": {"stall_seconds": 3}})
    outcome = anthropic_connector(timeout_seconds=0.3).submit(sample("stall mid stream"))
    assert outcome.result is not None
    assert outcome.result.collection_state == "truncated"
    assert outcome.result.error is not None
    assert outcome.result.error["message"].startswith("stream cut")
    assert outcome.upstream_id.startswith("msg_")


@pytest.mark.parametrize(
    ("code", "error_class"),
    [
        ("overloaded_error", ErrorClass.TRANSIENT),
        ("api_error", ErrorClass.TRANSIENT),
        ("rate_limit_error", ErrorClass.RATE_LIMITED),
        ("invalid_request_error", ErrorClass.INVALID),
    ],
)
def test_mid_stream_error_event_fails_with_a_classified_error(
    simulator: SimulatorHandle, anthropic_connector: Factory, code: str, error_class: ErrorClass
) -> None:
    simulator.script({"match": "break", "fault": "midstream_error", "params": {"code": code}})
    result = anthropic_connector().submit(sample("break in the middle")).result
    assert result is not None
    assert result.collection_state == "failed"
    assert result.error is not None
    assert result.error["class"] == error_class.value
    assert result.error["code"] == code
    assert b"event: error" in result.raw and b"message_stop" not in result.raw


def test_429_retry_after_is_honoured_and_the_retry_succeeds(
    simulator: SimulatorHandle, anthropic_connector: Factory
) -> None:
    simulator.script(
        {"match": "busy", "fault": "rate_limit", "times": 1, "params": {"retry_after_seconds": 3}}
    )
    connector = anthropic_connector()
    with pytest.raises(UpstreamError) as caught:
        connector.submit(sample("busy hour"))
    error = caught.value
    assert error.error_class is ErrorClass.RATE_LIMITED
    assert error.status_code == 429
    assert error.retry_after == 3.0  # the `retry-after` header
    assert error.request_id is not None and error.request_id.startswith("req_")
    assert json.loads(error.raw or b"")["request_id"] == error.request_id

    decision = POLICY.decide(error, attempt_no=1, elapsed_seconds=0, rng=random.Random(0))
    assert decision.retry and decision.delay_seconds >= 3.0

    retried = connector.submit(sample("busy hour"), attempt_no=2)
    assert retried.result is not None and retried.result.collection_state == "completed"


@pytest.mark.parametrize(("fault", "status"), [("server_error", 500), ("overloaded", 529)])
def test_5xx_and_529_are_transient_and_retried(
    simulator: SimulatorHandle, anthropic_connector: Factory, fault: str, status: int
) -> None:
    simulator.script({"match": "flaky", "fault": fault})
    with pytest.raises(UpstreamError) as caught:
        anthropic_connector().submit(sample("flaky upstream"))
    assert caught.value.error_class is ErrorClass.TRANSIENT
    assert caught.value.status_code == status
    assert POLICY.decide(caught.value, attempt_no=1, elapsed_seconds=0).retry


@pytest.mark.parametrize("status", [401, 403])
def test_401_and_403_are_auth_and_not_retried(
    simulator: SimulatorHandle, anthropic_connector: Factory, status: int
) -> None:
    simulator.script({"match": "who", "fault": "auth_error", "params": {"status": status}})
    with pytest.raises(UpstreamError) as caught:
        anthropic_connector().submit(sample("who am i"))
    error = caught.value
    assert error.error_class is ErrorClass.AUTH and error.status_code == status
    assert not POLICY.decide(error, attempt_no=1, elapsed_seconds=0).retry


def test_invalid_key_is_auth_and_never_leaks(
    simulator: SimulatorHandle, anthropic_connector: Factory
) -> None:
    with pytest.raises(UpstreamError) as caught:
        anthropic_connector(api_key="invalid-key-xyz").submit(sample("who am i"))
    error = caught.value
    assert error.error_class is ErrorClass.AUTH and error.status_code == 401
    assert "invalid-key-xyz" not in str(error) and b"invalid-key-xyz" not in (error.raw or b"")


def test_login_page_with_200_is_a_parse_failure_sent_to_review(
    simulator: SimulatorHandle, anthropic_connector: Factory
) -> None:
    simulator.script({"match": "captcha", "fault": "login_page"})
    result = anthropic_connector().submit(sample("captcha time")).result
    assert result is not None
    assert result.collection_state == "failed"
    assert result.error is not None and result.error["class"] == "parse_failed"
    assert result.raw.startswith(b"<!DOCTYPE html>")
    assert POLICY.decide(ErrorClass.PARSE_FAILED, attempt_no=1, elapsed_seconds=0).action == REVIEW


def test_hang_past_the_timeout_is_acceptance_unknown(
    simulator: SimulatorHandle, anthropic_connector: Factory
) -> None:
    simulator.script({"match": "hang", "fault": "hang", "params": {"hang_seconds": 3}})
    with pytest.raises(UpstreamError) as caught:
        anthropic_connector(timeout_seconds=0.3).submit(sample("hang forever"))
    assert caught.value.error_class is ErrorClass.ACCEPTANCE_UNKNOWN
    assert POLICY.decide(caught.value, attempt_no=1, elapsed_seconds=0).action == VERIFY


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


def test_no_search_answer_has_no_citations(
    simulator: SimulatorHandle, anthropic_connector: Factory
) -> None:
    cite_everything(simulator)
    result = anthropic_connector().submit(sample("offline", mode="no_search")).result
    assert result is not None and result.collection_state == "completed"
    assert result.citations == []
    assert result.answer_text == _intended(simulator)["answer_text"]


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


@pytest.mark.parametrize(
    ("raw_name", "expected_name"),
    [
        ("success.sse", "success.expected.json"),
        ("truncated.sse", "truncated.expected.json"),
        ("nonstream.json", "nonstream.expected.json"),
    ],
)
def test_parse_of_captured_fixtures_matches_the_reviewed_result(
    raw_name: str, expected_name: str
) -> None:
    raw = (FIXTURES / raw_name).read_bytes()
    expected = json.loads((FIXTURES / expected_name).read_text(encoding="utf-8"))
    result = AnthropicConnector.parse(raw)  # as `reparse` does: no content type, no sample
    assert comparable(result, "raw") == expected
    for citation in expected["citations"]:
        assert result.answer_text[citation["start"] : citation["end"]]


def _write_fixtures() -> None:
    """Regenerate the fixtures from the simulator (`python -m tests.connectors.test_anthropic`);
    review the expected JSON by eye before committing it."""
    from connectors.base import ConnectorConfig
    from connectors.simulator import start_simulator

    FIXTURES.mkdir(parents=True, exist_ok=True)
    profile = {"emoji_rate": 1.0, "citation_rate": 1.0}
    with start_simulator(seed=7, world=CITED_WORLD, profile=profile) as handle:
        handle.script({"match": "cut", "fault": "truncate"})
        config = ConnectorConfig("anthropic", handle.url("anthropic"), "sim-key", "claude-test")
        connector = AnthropicConnector(config)
        for name, question in (("success", "哪家云服务最适合初创公司？"), ("truncated", "cut me")):
            result = connector.submit(sample(question)).result
            assert result is not None
            (FIXTURES / f"{name}.sse").write_bytes(result.raw)
        body = connector.request_body(sample("Which CRM has the best support?"))
        response = requests.post(
            f"{handle.url('anthropic')}/v1/messages",
            json=body | {"stream": False},
            headers=HEADERS,
            timeout=5,
        )
        (FIXTURES / "nonstream.json").write_bytes(response.content)
    for raw_name, expected_name in (
        ("success.sse", "success.expected.json"),
        ("truncated.sse", "truncated.expected.json"),
        ("nonstream.json", "nonstream.expected.json"),
    ):
        parsed = AnthropicConnector.parse((FIXTURES / raw_name).read_bytes())
        text = json.dumps(comparable(parsed, "raw"), ensure_ascii=False, indent=2) + "\n"
        (FIXTURES / expected_name).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    _write_fixtures()
