"""The Gemini adapter against the simulator over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import requests

from connectors.adapters.gemini import GeminiConnector
from simulator import SimulatorHandle

from .contract import cite_everything, sample

Factory = Callable[..., GeminiConnector]
HEADERS = {"x-goog-api-key": "k"}


def _intended(simulator: SimulatorHandle) -> dict[str, Any]:
    return simulator.answers("gemini")[-1]


def _post(simulator: SimulatorHandle, method: str, body: dict[str, Any], **params: str) -> Any:
    return requests.post(
        f"{simulator.url('gemini')}/v1beta/models/gemini-test:{method}",
        json=body,
        headers=HEADERS,
        params=params,
        timeout=5,
    )


def test_titles_are_domains_the_response_id_is_the_only_id_and_frames_are_crlf(
    simulator: SimulatorHandle, gemini_connector: Factory
) -> None:
    cite_everything(simulator)
    outcome = gemini_connector().submit(sample("哪家云服务最适合初创公司？", region="global"))
    assert outcome.result is not None and outcome.result.citations
    assert all(c.title and c.title in c.url for c in outcome.result.citations)
    assert b"\r\n\r\n" in outcome.result.raw  # CRLF framing read correctly
    assert outcome.request_id == outcome.upstream_id
    paths = simulator.stats()["platforms"]["gemini"]["paths"]
    assert paths == {"POST /v1beta/models/gemini-test:streamGenerateContent": 1}


def test_thought_parts_are_skipped_and_part_index_is_honoured(
    simulator: SimulatorHandle, gemini_connector: Factory
) -> None:
    cite_everything(simulator)
    body = gemini_connector().request_body(sample("think aloud", region="global"))
    body["generationConfig"] = {"thinkingConfig": {"includeThoughts": True}}
    response = _post(simulator, "generateContent", body)
    payload = response.json()
    assert payload["candidates"][0]["content"]["parts"][0]["thought"] is True
    supports = payload["candidates"][0]["groundingMetadata"]["groundingSupports"]
    assert {s["segment"]["partIndex"] for s in supports} == {1}
    result = GeminiConnector.parse(response.content, content_type="application/json")
    intended = _intended(simulator)
    assert result.answer_text == intended["answer_text"] and result.warnings == []
    assert [result.answer_text[c.start : c.end] for c in result.citations] == [
        c["cited_text"] for c in intended["citations"]
    ]
    streamed = _post(simulator, "streamGenerateContent", body, alt="sse")
    again = GeminiConnector.parse(streamed.content, content_type="text/event-stream")
    intended = _intended(simulator)
    assert again.answer_text == intended["answer_text"] and again.warnings == []
    assert [again.answer_text[c.start : c.end] for c in again.citations] == [
        c["cited_text"] for c in intended["citations"]
    ]


def test_json_array_stream_without_alt_sse_parses_and_a_cut_array_is_truncated(
    simulator: SimulatorHandle, gemini_connector: Factory
) -> None:
    cite_everything(simulator)
    body = gemini_connector().request_body(sample("array form", region="global"))
    response = _post(simulator, "streamGenerateContent", body)
    assert response.content.startswith(b"[")
    result = GeminiConnector.parse(response.content, content_type=response.headers["content-type"])
    intended = _intended(simulator)
    assert result.collection_state == "completed"
    assert result.answer_text == intended["answer_text"]
    assert [result.answer_text[c.start : c.end] for c in result.citations] == [
        c["cited_text"] for c in intended["citations"]
    ]
    simulator.script({"match": "array cut", "fault": "truncate"})
    cut = _post(simulator, "streamGenerateContent", body | {"contents": [
        {"role": "user", "parts": [{"text": "array cut"}]}]})  # fmt: skip
    truncated = GeminiConnector.parse(cut.content, content_type="application/json")
    assert truncated.collection_state == "truncated"
    assert truncated.answer_text and truncated.upstream_id is not None


def test_request_body_per_mode_and_capabilities(gemini_connector: Factory) -> None:
    connector = gemini_connector(model="models/gemini-test")
    web = connector.request_body(sample("q", region="global"))
    assert web["contents"] == [{"role": "user", "parts": [{"text": "q"}]}]
    assert web["tools"] == [{"google_search": {}}]
    assert "tools" not in connector.request_body(sample("q", mode="no_search"))
    deep = connector.request_body(sample("q", mode="deep_thinking"))
    assert deep["generationConfig"]["thinkingConfig"]["thinkingBudget"] > 0
    assert connector.model(sample("q")) == "gemini-test"
    capabilities = connector.capabilities()
    assert capabilities.problems(device="api", region="global", mode="deep_thinking",
                                 screenshot_policy="none") == []  # fmt: skip
    # No user-location setting exists for google_search: a region cannot be promised.
    assert capabilities.problems(device="api", region="us", mode="web_search",
                                 screenshot_policy="none")  # fmt: skip


def test_no_search_asks_for_no_grounding(
    simulator: SimulatorHandle, gemini_connector: Factory
) -> None:
    result = gemini_connector().submit(sample("offline", mode="no_search", region="global")).result
    assert result is not None and b"groundingMetadata" not in result.raw


@pytest.mark.parametrize(
    ("headers", "body", "status", "state"),
    [
        ({}, {"contents": [{"parts": [{"text": "q"}]}]}, 403, "PERMISSION_DENIED"),
        (HEADERS, {"contents": []}, 400, "INVALID_ARGUMENT"),
    ],
)
def test_simulator_validates_like_the_api(
    simulator: SimulatorHandle, headers: dict[str, str], body: dict[str, Any], status: int,
    state: str,
) -> None:  # fmt: skip
    response = requests.post(
        f"{simulator.url('gemini')}/v1beta/models/m:generateContent",
        json=body,
        headers=headers,
        timeout=5,
    )
    assert response.status_code == status
    assert response.json()["error"]["status"] == state
    assert response.json()["error"]["code"] == status


def _body(text: str, supports: list[dict[str, Any]], **candidate: Any) -> bytes:
    return json.dumps(
        {
            "candidates": [
                {
                    "content": {"role": "model", "parts": [{"text": text}]},
                    "groundingMetadata": {
                        "groundingChunks": [
                            {
                                "web": {
                                    "uri": "https://a.example/?utm_source=x",
                                    "title": "a.example",
                                }
                            }
                        ],
                        "groundingSupports": supports,
                    },
                }
                | candidate
            ],
            "responseId": "r1",
        },
        ensure_ascii=False,
    ).encode()


def test_omitted_start_index_means_zero_and_bytes_are_converted() -> None:
    text = "云服务 🚀 fast. Rest."
    end_byte = len("云服务 🚀 fast.".encode())
    raw = _body(text, [{"segment": {"endIndex": end_byte}, "groundingChunkIndices": [0]}],
                finishReason="STOP")  # fmt: skip
    result = GeminiConnector.parse(raw, content_type="application/json")
    assert [(c.start, c.end) for c in result.citations] == [(0, len("云服务 🚀 fast."))]
    assert result.citations[0].normalized_url == "https://a.example/"
    assert result.request_id == result.upstream_id == "r1"


def test_offsets_that_disagree_with_the_segment_text_are_relocated_with_a_warning() -> None:
    text = "Intro. Acme is fast. Outro."
    # Offsets counted in UTF-16 units or off by a few bytes: the segment text is authoritative.
    segment = {"startIndex": 9, "endIndex": 22, "text": "Acme is fast."}
    raw = _body(text, [{"segment": segment, "groundingChunkIndices": [0, 5]}],
                finishReason="MAX_TOKENS")  # fmt: skip
    result = GeminiConnector.parse(raw)
    assert [result.answer_text[c.start : c.end] for c in result.citations] == ["Acme is fast."]
    assert result.warnings == ["CITATION_SPAN_RELOCATED", "MAX_TOKENS"]


def test_blocked_prompt_fails_and_safety_stop_is_a_warning() -> None:
    blocked = json.dumps({"promptFeedback": {"blockReason": "SAFETY"}, "responseId": "r2"})
    result = GeminiConnector.parse(blocked.encode(), content_type="application/json")
    assert result.collection_state == "failed"
    assert result.error is not None and result.error["class"] == "upstream_failed"
    stream = 'data: {"candidates": [{"content": {"parts": [{"text": "Hm"}]}, ' \
        '"finishReason": "SAFETY"}], "responseId": "r3"}\r\n\r\n'  # fmt: skip
    stopped = GeminiConnector.parse(stream.encode())
    assert stopped.collection_state == "completed"
    assert stopped.warnings == ["FINISH_REASON_SAFETY"]
