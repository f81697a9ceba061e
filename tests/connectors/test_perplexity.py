"""The Perplexity Sonar adapter against the simulator over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import requests

from connectors.adapters.perplexity import PerplexityConnector
from connectors.base import ErrorClass, NormalizedResult, UpstreamError
from connectors.citations import claim_span_before_marker, find_markers, span_before_marker
from simulator import SimulatorHandle

from .contract import cite_everything, sample

Factory = Callable[..., PerplexityConnector]
HEADERS = {"Authorization": "Bearer k"}


def _intended(simulator: SimulatorHandle) -> dict[str, Any]:
    return simulator.answers("perplexity")[-1]


def _check_spans(result: NormalizedResult, intended: dict[str, Any]) -> None:
    assert result.answer_text == intended["answer_text"]
    assert len(result.citations) == len(intended["citations"])
    for citation, expected in zip(result.citations, intended["citations"], strict=True):
        assert citation.url == expected["url"]
        assert citation.title == expected["title"]
        assert result.answer_text[citation.start : citation.end] == expected["cited_text"]


@pytest.mark.parametrize(
    "question",
    [
        "Which cloud provider is best for startups?",
        "哪家云服务最适合初创公司？",
        "Best CRM for a small team?",
        "最好的客户管理软件是哪个？",
    ],
)
def test_marker_spans_are_the_claims_before_them_including_cjk_and_emoji(
    simulator: SimulatorHandle, perplexity_connector: Factory, question: str
) -> None:
    cite_everything(simulator)
    result = perplexity_connector().submit(sample(question)).result
    intended = _intended(simulator)

    assert result is not None
    assert result.collection_state == "completed"
    assert result.error is None and result.warnings == []
    assert any(ord(ch) > 0xFFFF for ch in result.answer_text)
    assert len(result.citations) >= 4
    _check_spans(result, intended)
    assert all("utm_" not in c.normalized_url for c in result.citations)
    assert len(find_markers(result.answer_text)) == len(result.citations)  # markers stay


def test_both_marker_placements_occur_and_resolve(
    simulator: SimulatorHandle, perplexity_connector: Factory
) -> None:
    """`claim[1].` and `claim.[1]`: the span never swallows the previous claim's marker."""
    cite_everything(simulator)
    connector = perplexity_connector()
    placements = set()
    for number in range(8):
        result = connector.submit(sample(f"placement {number}")).result
        assert result is not None
        _check_spans(result, _intended(simulator))
        assert not any(
            result.answer_text[c.start : c.end].startswith("[") for c in result.citations
        )
        first = find_markers(result.answer_text)[0]
        placements.add(result.answer_text[first.start - 1] == ".")
    assert placements == {True, False}


def test_reasoning_section_is_removed_from_the_answer(
    simulator: SimulatorHandle, perplexity_connector: Factory
) -> None:
    cite_everything(simulator)
    connector = perplexity_connector(extra={"deep_thinking_model": "sonar-reasoning-pro"})
    assert "deep_thinking" in connector.capabilities().modes
    result = connector.submit(sample("think first", mode="deep_thinking")).result
    assert result is not None and result.collection_state == "completed"
    assert b"<think>" in result.raw
    assert result.warnings == ["REASONING_REMOVED"]
    _check_spans(result, _intended(simulator))


def test_429_with_a_retry_after_header_is_honoured(
    simulator: SimulatorHandle, perplexity_connector: Factory
) -> None:
    simulator.script(
        {"match": "busy", "fault": "rate_limit", "params": {"retry_after_header": "4"}}
    )
    with pytest.raises(UpstreamError) as caught:
        perplexity_connector().submit(sample("busy hour"))
    assert caught.value.error_class is ErrorClass.RATE_LIMITED
    assert caught.value.retry_after == 4.0


def test_request_body_per_mode_and_capabilities(
    simulator: SimulatorHandle, perplexity_connector: Factory
) -> None:
    connector = perplexity_connector()
    web = connector.request_body(sample("q", region="jp"))
    assert web["model"] == "sonar" and web["stream"] is True
    assert web["web_search_options"] == {"user_location": {"country": "JP"}}
    offline = connector.request_body(sample("q", mode="no_search"))
    assert offline["disable_search"] is True and "web_search_options" not in offline
    capabilities = connector.capabilities()
    assert capabilities.modes == {"web_search", "no_search"}  # no reasoning model configured
    assert capabilities.problems(device="api", region="us", mode="deep_thinking",
                                 screenshot_policy="none")  # fmt: skip
    cite_everything(simulator)
    result = connector.submit(sample("offline", mode="no_search")).result
    assert result is not None and result.citations == []
    assert find_markers(result.answer_text) == []


@pytest.mark.parametrize(
    ("body", "status", "kind"),
    [
        ({"model": "llama-3.1-sonar-small-128k-online", "messages": [{}]}, 400, "invalid_model"),
        ({"model": "sonar"}, 400, "bad_request"),
    ],
)
def test_simulator_validates_like_the_api(
    simulator: SimulatorHandle, body: dict[str, Any], status: int, kind: str
) -> None:
    response = requests.post(
        f"{simulator.url('perplexity')}/chat/completions", json=body, headers=HEADERS, timeout=5
    )
    assert response.status_code == status
    assert response.json()["error"]["type"] == kind
    missing = requests.post(f"{simulator.url('perplexity')}/chat/completions", json={}, timeout=5)
    assert missing.status_code == 401


def _frames(*payloads: Any) -> bytes:
    return "".join(
        f"data: {p if isinstance(p, str) else json.dumps(p, ensure_ascii=False)}\r\n\r\n"
        for p in payloads
    ).encode()


def _chunk(content: str, finish: str | None = None, **top: Any) -> dict[str, Any]:
    choice = {"index": 0, "finish_reason": finish, "delta": {"content": content}}
    return {"id": "p1", "object": "chat.completion.chunk", "choices": [choice]} | top


def test_done_without_finish_reason_is_truncated_and_finish_without_done_is_complete() -> None:
    cut = PerplexityConnector.parse(_frames(_chunk("Acme is fast[1]."), "[DONE]"))
    assert cut.collection_state == "truncated"
    whole = PerplexityConnector.parse(
        _frames(_chunk("Acme is fast[1]."), _chunk("", "stop", citations=["https://a.example/"]))
    )
    assert whole.collection_state == "completed"
    assert [(c.url, c.title, whole.answer_text[c.start : c.end]) for c in whole.citations] == [
        ("https://a.example/", None, "Acme is fast")  # legacy `citations` list, no title
    ]


def test_unresolved_markers_and_length_stop_are_warnings() -> None:
    raw = _frames(
        _chunk("云很快[1]。Globex[2][3] 好。"),
        _chunk("", "length", search_results=[{"url": "https://a.example/", "title": "A"},
                                             {"url": "https://b.example/", "title": "B"}]),
    )  # fmt: skip
    result = PerplexityConnector.parse(raw)
    assert result.collection_state == "completed"
    assert [(c.url, result.answer_text[c.start : c.end]) for c in result.citations] == [
        ("https://a.example/", "云很快"),
        ("https://b.example/", "Globex"),
    ]
    assert result.warnings == ["CITATION_MARKER_UNRESOLVED", "MAX_TOKENS"]


def test_claim_span_skips_the_previous_claims_markers() -> None:
    text = "Intro. First.[1][2] 🚀 Second.[3] 第三。[4]"
    markers = find_markers(text)
    plain = span_before_marker(text, markers[2])
    assert text[plain[0] : plain[1]] == "[1][2] 🚀 Second."  # what the plain helper gives
    spans = [claim_span_before_marker(text, m) for m in markers]
    assert [text[a:b] for a, b in spans] == ["First.", "First.", "🚀 Second.", "第三。"]
