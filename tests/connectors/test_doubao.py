"""The Volcengine Ark (Doubao) adapter against the simulator over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from connectors.adapters.doubao import RESPONSES_PATH, DoubaoConnector
from connectors.base import ErrorClass, UpstreamError
from connectors.retry import REVIEW, VERIFY
from connectors.simulator import SimulatorHandle

from .conftest import sample
from .contract import POLICY, cite_everything, comparable

Factory = Callable[..., DoubaoConnector]
FIXTURES = Path(__file__).parent / "fixtures" / "doubao"
BOT = {"bot_id": "bot-20261111-test"}


def _intended(simulator: SimulatorHandle) -> dict[str, Any]:
    return simulator.answers("doubao")[-1]


@pytest.mark.parametrize(
    "question", ["Which cloud provider is best for startups?", "哪家云服务最适合初创公司？"]
)
@pytest.mark.parametrize("extra", [{}, BOT], ids=["responses", "bots"])
def test_answer_and_citations_without_offsets_including_cjk_and_emoji(
    simulator: SimulatorHandle, doubao_connector: Factory, question: str, extra: dict[str, str]
) -> None:
    cite_everything(simulator)
    outcome = doubao_connector(extra=extra).submit(sample(question, region="cn"))
    result = outcome.result
    intended = _intended(simulator)

    assert result is not None
    assert result.collection_state == "completed" and result.error is None
    assert result.answer_text == intended["answer_text"]
    assert any(ord(ch) > 0xFFFF for ch in result.answer_text)  # emoji outside the BMP
    assert len(intended["citations"]) >= 4
    assert [c.url for c in result.citations] == [c["url"] for c in intended["citations"]]
    assert [c.title for c in result.citations] == [c["title"] for c in intended["citations"]]
    # Ark annotations / references carry no offsets: none are invented.
    assert all(c.start is None and c.end is None for c in result.citations)
    assert all("utm_" not in c.normalized_url for c in result.citations)
    assert [c.id for c in result.citations] == [f"c{n}" for n in range(1, 5)]


def test_request_id_header_and_response_id(
    simulator: SimulatorHandle, doubao_connector: Factory
) -> None:
    outcome = doubao_connector().submit(sample("best crm", region="cn"))
    intended = _intended(simulator)
    assert outcome.upstream_id == intended["upstream_id"]
    assert outcome.upstream_id.startswith("resp_")
    assert outcome.request_id == intended["request_id"]
    assert outcome.result is not None and outcome.result.request_id == intended["request_id"]
    assert outcome.egress == "direct" and outcome.result.status_code == 200

    bot = doubao_connector(extra=BOT).submit(sample("best crm", region="cn"))
    assert bot.upstream_id == _intended(simulator)["upstream_id"]
    assert bot.request_id == _intended(simulator)["request_id"]


@pytest.mark.parametrize("extra", [{}, BOT], ids=["responses", "bots"])
def test_reparse_of_the_captured_transcript_equals_the_live_result(
    simulator: SimulatorHandle, doubao_connector: Factory, extra: dict[str, str]
) -> None:
    cite_everything(simulator)
    live = doubao_connector(extra=extra).submit(sample("emoji and offsets", region="cn")).result
    assert live is not None
    again = DoubaoConnector.parse(live.raw, content_type=live.raw_mime, sample_id=1)
    # Status and request id come from the HTTP exchange (header), not from the body.
    again.status_code, again.request_id = live.status_code, live.request_id
    assert comparable(again) == comparable(live)
    sniffed = DoubaoConnector.parse(live.raw)  # no content type: recognised as SSE
    assert sniffed.answer_text == live.answer_text and sniffed.citations == live.citations


@pytest.mark.parametrize("extra", [{}, BOT], ids=["responses", "bots"])
def test_non_streaming_json_body_parses_the_same(
    simulator: SimulatorHandle, doubao_connector: Factory, extra: dict[str, str]
) -> None:
    cite_everything(simulator)
    connector = doubao_connector(extra=extra)
    body = connector.request_body(sample("json please", region="cn")) | {"stream": False}
    path = RESPONSES_PATH if not extra else "/api/v3/bots/chat/completions"
    response = requests.post(
        f"{simulator.url('doubao')}{path}",
        json=body,
        headers={"Authorization": "Bearer k"},
        timeout=5,
    )
    result = DoubaoConnector.parse(response.content, content_type=response.headers["content-type"])
    intended = _intended(simulator)
    assert result.collection_state == "completed"
    assert result.answer_text == intended["answer_text"]
    assert [c.url for c in result.citations] == [c["url"] for c in intended["citations"]]


@pytest.mark.parametrize("extra", [{}, BOT], ids=["responses", "bots"])
def test_truncated_stream_is_truncated_not_a_short_answer(
    simulator: SimulatorHandle, doubao_connector: Factory, extra: dict[str, str]
) -> None:
    simulator.script({"match": "cut me", "fault": "truncate"})
    result = doubao_connector(extra=extra).submit(sample("please cut me off", region="cn")).result
    assert result is not None
    assert result.collection_state == "truncated" and result.evidence_state == "partial"
    assert result.error is not None and result.error["class"] == "truncated"
    assert result.raw  # kept
    assert b"response.completed" not in result.raw and b"[DONE]" not in result.raw
    assert result.upstream_id is not None  # known from the first frame


@pytest.mark.parametrize(
    ("variant", "code", "expected"),
    [
        ("error", "InternalServiceError", ErrorClass.TRANSIENT),
        ("response.failed", "RateLimitExceeded.EndpointTPMExceeded", ErrorClass.RATE_LIMITED),
        ("error", "OutputTextRiskDetection", ErrorClass.UPSTREAM_FAILED),
    ],
)
def test_mid_stream_error_fails_with_a_classified_error(
    simulator: SimulatorHandle,
    doubao_connector: Factory,
    variant: str,
    code: str,
    expected: ErrorClass,
) -> None:
    simulator.script(
        {"match": "break", "fault": "midstream_error", "params": {"variant": variant, "code": code}}
    )
    result = doubao_connector().submit(sample("break in the middle", region="cn")).result
    assert result is not None
    assert result.collection_state == "failed"
    assert result.error is not None
    assert result.error["class"] == expected.value and result.error["code"] == code
    assert result.raw


def test_bots_mid_stream_error_frame_fails_classified(
    simulator: SimulatorHandle, doubao_connector: Factory
) -> None:
    simulator.script({"match": "break", "fault": "midstream_error"})
    result = doubao_connector(extra=BOT).submit(sample("break in the middle", region="cn")).result
    assert result is not None
    assert result.collection_state == "failed"
    assert result.error is not None
    assert result.error["class"] == ErrorClass.TRANSIENT.value
    assert b'data: {"error"' in result.raw


def test_429_is_rate_limited_without_a_hint_and_retried_with_backoff(
    simulator: SimulatorHandle, doubao_connector: Factory
) -> None:
    simulator.script({"match": "busy", "fault": "rate_limit", "times": 1})
    connector = doubao_connector()
    with pytest.raises(UpstreamError) as caught:
        connector.submit(sample("busy hour", region="cn"))
    error = caught.value
    assert error.error_class is ErrorClass.RATE_LIMITED
    assert error.status_code == 429
    assert error.retry_after is None  # Ark documents no Retry-After
    assert error.request_id is not None and error.request_id.startswith("2026")
    decision = POLICY.decide(error, attempt_no=1, elapsed_seconds=0, rng=random.Random(0))
    assert decision.retry and decision.delay_seconds >= 0.5
    retried = connector.submit(sample("busy hour", region="cn"), attempt_no=2)
    assert retried.result is not None and retried.result.collection_state == "completed"


def test_quota_exceeded_429_is_auth_not_rate_limited() -> None:
    body = json.dumps(
        {"error": {"code": "QuotaExceeded", "message": "free quota used up", "type": "x"}}
    ).encode()
    error = DoubaoConnector._http_error(429, {"X-Request-Id": "rid"}, body, "direct")
    assert error.error_class is ErrorClass.AUTH and error.request_id == "rid"
    assert not POLICY.decide(error, attempt_no=1, elapsed_seconds=0).retry


@pytest.mark.parametrize(("fault", "status"), [("server_error", 500), ("overloaded", 503)])
def test_5xx_is_transient_and_retried(
    simulator: SimulatorHandle, doubao_connector: Factory, fault: str, status: int
) -> None:
    simulator.script({"match": "flaky", "fault": fault})
    with pytest.raises(UpstreamError) as caught:
        doubao_connector().submit(sample("flaky upstream", region="cn"))
    assert caught.value.error_class is ErrorClass.TRANSIENT
    assert caught.value.status_code == status
    assert POLICY.decide(caught.value, attempt_no=1, elapsed_seconds=0).retry


@pytest.mark.parametrize(("params", "status"), [({}, 401), ({"status": 403}, 403)])
def test_401_and_403_are_auth_and_not_retried(
    simulator: SimulatorHandle, doubao_connector: Factory, params: dict[str, int], status: int
) -> None:
    simulator.script({"match": "who", "fault": "auth_error", "params": params})
    with pytest.raises(UpstreamError) as caught:
        doubao_connector().submit(sample("who am i", region="cn"))
    error = caught.value
    assert error.error_class is ErrorClass.AUTH and error.status_code == status
    assert error.request_id is not None
    assert not POLICY.decide(error, attempt_no=1, elapsed_seconds=0).retry


def test_a_bad_key_never_leaks(simulator: SimulatorHandle, doubao_connector: Factory) -> None:
    with pytest.raises(UpstreamError) as caught:
        doubao_connector(api_key="invalid-ark-key").submit(sample("who am i", region="cn"))
    assert caught.value.error_class is ErrorClass.AUTH
    assert "invalid-ark-key" not in str(caught.value)
    assert b"invalid-ark-key" not in (caught.value.raw or b"")


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


def test_login_page_with_200_is_a_parse_failure_sent_to_review(
    simulator: SimulatorHandle, doubao_connector: Factory
) -> None:
    simulator.script({"match": "captcha", "fault": "login_page"})
    result = doubao_connector().submit(sample("captcha time", region="cn")).result
    assert result is not None
    assert result.collection_state == "failed"
    assert result.error is not None and result.error["class"] == "parse_failed"
    assert result.raw.startswith(b"<!DOCTYPE html>")
    assert POLICY.decide(ErrorClass.PARSE_FAILED, attempt_no=1, elapsed_seconds=0).action == REVIEW


def test_hang_past_the_timeout_is_acceptance_unknown(
    simulator: SimulatorHandle, doubao_connector: Factory
) -> None:
    simulator.script({"match": "hang", "fault": "hang", "params": {"hang_seconds": 3}})
    with pytest.raises(UpstreamError) as caught:
        doubao_connector(timeout_seconds=0.3).submit(sample("hang forever", region="cn"))
    assert caught.value.error_class is ErrorClass.ACCEPTANCE_UNKNOWN
    assert POLICY.decide(caught.value, attempt_no=1, elapsed_seconds=0).action == VERIFY


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


def test_deep_thinking_reasoning_is_not_part_of_the_answer(
    simulator: SimulatorHandle, doubao_connector: Factory
) -> None:
    result = doubao_connector().submit(sample("think", region="cn", mode="deep_thinking")).result
    assert result is not None and result.collection_state == "completed"
    assert b"response.reasoning_summary_text.delta" in result.raw
    assert result.answer_text == _intended(simulator)["answer_text"]


def test_no_search_answer_has_no_citations(
    simulator: SimulatorHandle, doubao_connector: Factory
) -> None:
    cite_everything(simulator)
    result = doubao_connector().submit(sample("offline", region="cn", mode="no_search")).result
    assert result is not None and result.collection_state == "completed"
    assert result.citations == []


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
    failed = json.dumps(
        {"id": "resp_1", "object": "response", "status": "failed", "output": [],
         "error": {"code": "ServerOverloaded", "message": "busy"}}
    ).encode()  # fmt: skip
    result = DoubaoConnector.parse(failed, content_type="application/json")
    assert result.collection_state == "failed" and result.upstream_id == "resp_1"
    assert result.error is not None and result.error["class"] == "rate_limited"
    incomplete = json.dumps(
        {"id": "resp_2", "object": "response", "status": "incomplete", "output": [],
         "incomplete_details": {"reason": "max_output_tokens"}}
    ).encode()  # fmt: skip
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


@pytest.mark.parametrize(
    ("name", "mime"),
    [
        ("success.sse", "text/event-stream"),
        ("bots_success.sse", "text/event-stream"),
        ("nonstream.json", "application/json"),
    ],
)
def test_fixture_parses_to_the_reviewed_expected_json(name: str, mime: str) -> None:
    raw = (FIXTURES / name).read_bytes()
    expected = json.loads((FIXTURES / f"{name.split('.')[0]}.expected.json").read_text("utf-8"))
    data = comparable(DoubaoConnector.parse(raw, content_type=mime))
    assert data.pop("raw") == raw.decode("utf-8")
    assert data == expected


def test_truncated_fixture_is_truncated() -> None:
    raw = (FIXTURES / "truncated.sse").read_bytes()
    result = DoubaoConnector.parse(raw)
    assert result.collection_state == "truncated"
    assert result.error is not None and result.error["class"] == "truncated"
    assert result.raw == raw
