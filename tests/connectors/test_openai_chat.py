"""Contract tests: OpenAI Chat Completions (and OpenAI-compatible endpoints) against the
simulator over real HTTP."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import requests

from connectors.adapters.openai_chat import OpenAIChatConnector, chat_path
from connectors.base import ErrorClass, UpstreamError
from simulator import SimulatorHandle

from .contract import POLICY, cite_everything, sample

Factory = Callable[..., OpenAIChatConnector]
SEARCH_MODEL = "gpt-4o-mini-search-preview"


def _intended(simulator: SimulatorHandle, platform: str = "openai_chat") -> dict:
    return simulator.answers(platform)[-1]


def _frames(raw: bytes) -> list[Any]:
    lines = raw.decode().split("\n\n")
    return [json.loads(x[6:]) for x in lines if x.startswith("data: {")]


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
