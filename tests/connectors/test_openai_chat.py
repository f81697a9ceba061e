"""Contract tests: OpenAI Chat Completions (and OpenAI-compatible endpoints) against the
simulator over real HTTP."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import pytest
import requests

from connectors.adapters.openai_chat import OpenAIChatConnector, chat_path
from connectors.base import ErrorClass, UpstreamError
from connectors.retry import REVIEW, VERIFY
from connectors.simulator import SimulatorHandle

from .conftest import connector_factory, sample
from .contract import POLICY, cite_everything

Factory = Callable[..., OpenAIChatConnector]
SEARCH_MODEL = "gpt-4o-mini-search-preview"


@pytest.fixture
def chat_connector(simulator: SimulatorHandle) -> Factory:
    return connector_factory(
        OpenAIChatConnector,
        simulator,
        "openai_chat",
        api_key="sk-chat-secret-789",
        model=SEARCH_MODEL,
    )


def _intended(simulator: SimulatorHandle, platform: str = "openai_chat") -> dict:
    return simulator.answers(platform)[-1]


def _frames(raw: bytes) -> list[Any]:
    lines = raw.decode().split("\n\n")
    return [json.loads(x[6:]) for x in lines if x.startswith("data: {")]


@pytest.mark.parametrize(
    "question",
    ["Which cloud provider is best for startups?", "哪家云服务最适合初创公司？"],
)
def test_citations_point_at_the_cited_span_including_cjk_and_emoji(
    simulator: SimulatorHandle, chat_connector: Factory, question: str
) -> None:
    cite_everything(simulator)
    outcome = chat_connector().submit(sample(question))
    result = outcome.result
    intended = _intended(simulator)

    assert result is not None
    assert result.collection_state == "completed" and result.error is None
    assert result.answer_text == intended["answer_text"]
    assert any(ord(ch) > 0xFFFF for ch in result.answer_text)
    assert len(result.citations) == len(intended["citations"]) >= 4
    for citation, expected in zip(result.citations, intended["citations"], strict=True):
        assert citation.url == expected["url"]
        assert citation.title == expected["title"]
        assert result.answer_text[citation.start : citation.end] == expected["cited_text"]
        assert "utm_" not in citation.normalized_url


def test_citations_come_from_the_late_annotation_only_delta(
    simulator: SimulatorHandle, chat_connector: Factory
) -> None:
    cite_everything(simulator)
    result = chat_connector().submit(sample("late annotations")).result
    assert result is not None
    frames = _frames(result.raw)
    carrying = [f for f in frames if f["choices"] and "annotations" in f["choices"][0]["delta"]]
    assert len(carrying) == 1
    assert "content" not in carrying[0]["choices"][0]["delta"]  # no text with the annotations
    assert any("obfuscation" in f for f in frames)  # ignored, never part of the answer
    assert frames[-1]["choices"] == [] and frames[-1]["usage"]["total_tokens"] > 0
    assert result.raw.rstrip().endswith(b"data: [DONE]")
    assert len(result.citations) == len(carrying[0]["choices"][0]["delta"]["annotations"])


def test_submit_records_ids_and_egress(simulator: SimulatorHandle, chat_connector: Factory) -> None:
    outcome = chat_connector().submit(sample("best crm"))
    intended = _intended(simulator)
    assert outcome.upstream_id == intended["upstream_id"]
    assert outcome.upstream_id.startswith("chatcmpl-")
    assert outcome.request_id == intended["request_id"]
    assert outcome.request_id.startswith("req_")
    assert outcome.egress == "direct"
    assert outcome.result is not None and outcome.result.status_code == 200
    assert outcome.result.sample_id == 1


def test_reparse_of_the_captured_transcript_equals_the_live_result(
    simulator: SimulatorHandle, chat_connector: Factory
) -> None:
    cite_everything(simulator)
    live = chat_connector().submit(sample("emoji and offsets")).result
    assert live is not None
    again = OpenAIChatConnector.parse(live.raw, content_type=live.raw_mime, sample_id=1)
    for name in ("answer_text", "citations", "collection_state", "evidence_state", "upstream_id"):
        assert getattr(again, name) == getattr(live, name)
    sniffed = OpenAIChatConnector.parse(live.raw)  # no content type: recognised as SSE
    assert sniffed.answer_text == live.answer_text and sniffed.citations == live.citations


def test_non_streaming_configuration_reads_one_json_body(
    simulator: SimulatorHandle, chat_connector: Factory
) -> None:
    cite_everything(simulator)
    connector = chat_connector(extra={"stream": False})
    assert "stream" not in connector.request_body(sample("q"))
    result = connector.submit(sample("json please")).result
    intended = _intended(simulator)
    assert result is not None and result.collection_state == "completed"
    assert result.raw_mime.startswith("application/json")
    assert result.answer_text == intended["answer_text"]
    assert [result.answer_text[c.start : c.end] for c in result.citations] == [
        c["cited_text"] for c in intended["citations"]
    ]


def test_truncated_stream_is_truncated_not_a_short_answer(
    simulator: SimulatorHandle, chat_connector: Factory
) -> None:
    simulator.script({"match": "cut me", "fault": "truncate"})
    result = chat_connector().submit(sample("please cut me off")).result
    assert result is not None
    assert result.collection_state == "truncated"
    assert result.evidence_state == "partial"
    assert result.error is not None and result.error["class"] == "truncated"
    assert b"[DONE]" not in result.raw
    assert result.upstream_id is not None and result.upstream_id.startswith("chatcmpl-")


def test_stream_stalling_after_the_cut_keeps_the_partial_transcript(
    simulator: SimulatorHandle, chat_connector: Factory
) -> None:
    simulator.script({"match": "stall", "fault": "truncate", "params": {"stall_seconds": 3}})
    outcome = chat_connector(timeout_seconds=0.3).submit(sample("stall mid stream"))
    result = outcome.result
    assert result is not None and result.collection_state == "truncated"
    assert result.error is not None and result.error["message"].startswith("stream cut")
    assert outcome.upstream_id.startswith("chatcmpl-")


def test_mid_stream_error_fails_with_a_classified_error(
    simulator: SimulatorHandle, chat_connector: Factory
) -> None:
    simulator.script({"match": "break", "fault": "midstream_error"})
    result = chat_connector().submit(sample("break in the middle")).result
    assert result is not None
    assert result.collection_state == "failed"
    assert result.error is not None and result.error["class"] == ErrorClass.TRANSIENT.value
    assert b'data: {"error"' in result.raw


def test_429_hint_is_honoured_and_the_retry_succeeds(
    simulator: SimulatorHandle, chat_connector: Factory
) -> None:
    simulator.script(
        {"match": "busy", "fault": "rate_limit", "params": {"retry_after_seconds": 1.5}}
    )
    connector = chat_connector()
    with pytest.raises(UpstreamError) as caught:
        connector.submit(sample("busy hour"))
    error = caught.value
    assert error.error_class is ErrorClass.RATE_LIMITED
    assert error.retry_after == 1.5  # retry-after-ms wins over retry-after: 2
    assert error.request_id is not None and error.request_id.startswith("req_")
    decision = POLICY.decide(error, attempt_no=1, elapsed_seconds=0, rng=random.Random(0))
    assert decision.retry and decision.delay_seconds >= 1.5
    retried = connector.submit(sample("busy hour"), attempt_no=2)
    assert retried.result is not None and retried.result.collection_state == "completed"


@pytest.mark.parametrize(("fault", "status"), [("server_error", 500), ("overloaded", 503)])
def test_5xx_is_transient_and_retried(
    simulator: SimulatorHandle, chat_connector: Factory, fault: str, status: int
) -> None:
    simulator.script({"match": "flaky", "fault": fault})
    with pytest.raises(UpstreamError) as caught:
        chat_connector().submit(sample("flaky upstream"))
    assert caught.value.error_class is ErrorClass.TRANSIENT
    assert caught.value.status_code == status
    assert POLICY.decide(caught.value, attempt_no=1, elapsed_seconds=0).retry


def test_401_is_auth_and_not_retried(simulator: SimulatorHandle, chat_connector: Factory) -> None:
    with pytest.raises(UpstreamError) as caught:
        chat_connector(api_key="invalid-key-1").submit(sample("who am i"))
    error = caught.value
    assert error.error_class is ErrorClass.AUTH and error.status_code == 401
    assert not POLICY.decide(error, attempt_no=1, elapsed_seconds=0).retry
    assert "invalid-key-1" not in str(error) and b"invalid-key-1" not in (error.raw or b"")


def test_login_page_with_200_is_a_parse_failure_sent_to_review(
    simulator: SimulatorHandle, chat_connector: Factory
) -> None:
    simulator.script({"match": "captcha", "fault": "login_page"})
    result = chat_connector().submit(sample("captcha time")).result
    assert result is not None and result.collection_state == "failed"
    assert result.error is not None and result.error["class"] == "parse_failed"
    assert result.raw.startswith(b"<!DOCTYPE html>")
    assert POLICY.decide(ErrorClass.PARSE_FAILED, attempt_no=1, elapsed_seconds=0).action == REVIEW


def test_hang_past_the_timeout_is_acceptance_unknown(
    simulator: SimulatorHandle, chat_connector: Factory
) -> None:
    simulator.script({"match": "hang", "fault": "hang", "params": {"hang_seconds": 3}})
    with pytest.raises(UpstreamError) as caught:
        chat_connector(timeout_seconds=0.3).submit(sample("hang forever"))
    assert caught.value.error_class is ErrorClass.ACCEPTANCE_UNKNOWN
    assert POLICY.decide(caught.value, attempt_no=1, elapsed_seconds=0).action == VERIFY


def test_modes_follow_the_configured_model(chat_connector: Factory) -> None:
    search = chat_connector().capabilities()
    assert search.modes == frozenset({"web_search"})
    assert (
        search.problems(device="api", region="us", mode="web_search", screenshot_policy="none")
        == []
    )
    problems = search.problems(
        device="api", region="us", mode="no_search", screenshot_policy="none"
    )
    assert problems and "no_search" in problems[0]

    plain = chat_connector(model="gpt-4.1-mini").capabilities()
    assert plain.modes == frozenset({"no_search"})
    configured = chat_connector(model="x", extra={"modes": ["no_search", "deep_thinking"]})
    assert configured.capabilities().modes == frozenset({"no_search", "deep_thinking"})
    assert not search.asynchronous and not search.supports_lookup and not search.screenshots


def test_request_body_per_mode(chat_connector: Factory) -> None:
    connector = chat_connector()
    web = connector.request_body(sample("q", region="jp"))
    assert web["web_search_options"] == {
        "user_location": {"type": "approximate", "approximate": {"country": "JP"}}
    }
    assert web["stream"] is True and web["stream_options"] == {"include_usage": True}
    assert web["messages"] == [{"role": "user", "content": "q"}]
    assert "web_search_options" not in connector.request_body(sample("q", mode="no_search"))
    deep = connector.request_body(sample("q", mode="deep_thinking"))
    assert deep["reasoning_effort"] == "high"
    vendor = chat_connector(extra={"extra_body": {"enable_search": True}})
    assert vendor.request_body(sample("q", mode="no_search"))["enable_search"] is True


def test_web_search_options_on_a_plain_model_is_invalid_and_not_retried(
    simulator: SimulatorHandle, chat_connector: Factory
) -> None:
    # A misconfiguration (modes declared by hand): the upstream says 400, nobody retries it.
    connector = chat_connector(model="gpt-4.1-mini", extra={"modes": ["web_search"]})
    with pytest.raises(UpstreamError) as caught:
        connector.submit(sample("plain model with search"))
    assert caught.value.error_class is ErrorClass.INVALID
    assert not POLICY.decide(caught.value, attempt_no=1, elapsed_seconds=0).retry


def test_plain_model_answers_without_citations(
    simulator: SimulatorHandle, chat_connector: Factory
) -> None:
    cite_everything(simulator)
    result = chat_connector(model="gpt-4.1-mini").submit(sample("offline", mode="no_search"))
    assert result.result is not None and result.result.collection_state == "completed"
    assert result.result.citations == []


@pytest.mark.parametrize(
    ("base_url", "path"),
    [
        ("https://api.openai.com", "/v1/chat/completions"),
        ("https://api.openai.com/v1", "chat/completions"),
        ("https://openrouter.ai/api/v1/", "chat/completions"),
        ("https://dashscope.aliyuncs.com/compatible-mode/v1", "chat/completions"),
        ("https://ark.cn-beijing.volces.com/api/v3", "chat/completions"),
        ("https://generativelanguage.googleapis.com/v1beta/openai", "chat/completions"),
        ("http://127.0.0.1:11434", "/v1/chat/completions"),
    ],
)
def test_chat_path_under_any_base_url(base_url: str, path: str) -> None:
    assert chat_path(base_url) == path
    assert chat_path(base_url, "/custom/chat") == "/custom/chat"


@pytest.mark.parametrize(
    ("platform", "suffix"), [("deepseek", ""), ("deepseek", "/v1"), ("kimi", "/v1")]
)
def test_the_same_adapter_serves_other_openai_compatible_endpoints(
    simulator: SimulatorHandle, chat_connector: Factory, platform: str, suffix: str
) -> None:
    connector = chat_connector(
        base_url=simulator.url(platform) + suffix,
        model="compat-model",
        extra={"chat_path": "/chat/completions"} if not suffix else {},
    )
    outcome = connector.submit(sample("compatible endpoint", mode="no_search"))
    intended = _intended(simulator, platform)
    assert outcome.result is not None and outcome.result.collection_state == "completed"
    assert outcome.result.answer_text == intended["answer_text"]
    assert outcome.request_id == intended["request_id"]  # x-ds-trace-id / Msh-Request-Id
    assert simulator.stats()["platforms"][platform]["requests"] == 1


def test_parse_edge_cases_of_hand_made_transcripts() -> None:
    def chunk(delta: dict, finish: str | None = None) -> str:
        payload = {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": delta,
                   "finish_reason": finish}]}  # fmt: skip
        return "data: " + json.dumps(payload) + "\n\n"

    cut_by_length = (chunk({"content": "Half an ans"}, "length") + "data: [DONE]\n\n").encode()
    result = OpenAIChatConnector.parse(cut_by_length, content_type="text/event-stream")
    assert result.collection_state == "failed"
    assert result.error is not None and result.error["class"] == "upstream_failed"
    assert "length" in result.error["message"]

    no_blank_line = (chunk({"content": "Whole."}, "stop") + "data: [DONE]").encode()
    assert OpenAIChatConnector.parse(no_blank_line).collection_state == "completed"

    body = {"id": "chatcmpl-2", "object": "chat.completion", "choices": [{"index": 0,
            "finish_reason": "stop", "message": {"role": "assistant", "content": "Hi there",
            "annotations": [{"type": "url_citation", "url_citation": {"url": "https://a.example/?utm_source=x",
            "title": "A", "start_index": 3, "end_index": 99}}]}}]}  # fmt: skip
    parsed = OpenAIChatConnector.parse(json.dumps(body).encode(), content_type="application/json")
    assert parsed.collection_state == "completed" and parsed.upstream_id == "chatcmpl-2"
    assert (parsed.citations[0].start, parsed.citations[0].end) == (3, 8)  # clamped to the text
    assert parsed.citations[0].normalized_url == "https://a.example/"


def test_simulator_serves_chat_completions_non_streaming_over_http(
    simulator: SimulatorHandle,
) -> None:
    response = requests.post(
        f"{simulator.url('openai_chat')}/v1/chat/completions",
        json={"model": SEARCH_MODEL, "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": "Bearer k"},
        timeout=5,
    )
    body = response.json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["finish_reason"] == "stop"
    assert response.headers["x-request-id"].startswith("req_")
