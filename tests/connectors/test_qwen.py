"""The DashScope (Qwen) native adapter against the simulator over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from connectors.adapters.qwen import PATH, QwenConnector
from connectors.base import ErrorClass, UpstreamError
from connectors.retry import REVIEW, VERIFY
from connectors.simulator import SimulatorHandle

from .conftest import sample
from .contract import POLICY, cite_everything, comparable

Factory = Callable[..., QwenConnector]
FIXTURES = Path(__file__).parent / "fixtures" / "qwen"


def _intended(simulator: SimulatorHandle) -> dict[str, Any]:
    return simulator.answers("qwen")[-1]


def _ask(simulator: SimulatorHandle, connector: QwenConnector, question: str, **headers: str):
    body = connector.request_body(sample(question, region="cn"))
    return requests.post(
        f"{simulator.url('qwen')}{PATH}",
        json=body,
        headers={"Authorization": "Bearer k", **headers},
        timeout=5,
    )


@pytest.mark.parametrize(
    "question", ["Which cloud provider is best for startups?", "哪家云服务最适合初创公司？"]
)
def test_markers_become_spans_over_the_cited_claim_including_cjk_and_emoji(
    simulator: SimulatorHandle, qwen_connector: Factory, question: str
) -> None:
    cite_everything(simulator)
    outcome = qwen_connector().submit(sample(question, region="cn"))
    result = outcome.result
    intended = _intended(simulator)

    assert result is not None
    assert result.collection_state == "completed" and result.error is None
    assert result.answer_text == intended["answer_text"]  # markers kept as written
    assert "[1]" in result.answer_text
    assert any(ord(ch) > 0xFFFF for ch in result.answer_text)  # emoji outside the BMP
    spans = [c for c in result.citations if c.start is not None]
    assert len(spans) == len(intended["citations"]) >= 4
    for citation, expected in zip(spans, intended["citations"], strict=True):
        assert citation.url == expected["url"]
        assert citation.title == expected["title"]
        assert result.answer_text[citation.start : citation.end] == expected["cited_text"]
        assert (citation.start, citation.end) == (expected["start"], expected["end"])
        assert "utm_" not in citation.normalized_url
    # A search result no marker refers to is still a source, without offsets.
    extra = [c for c in result.citations if c.start is None]
    assert len(extra) == 1 and extra[0].end is None and extra[0].url.endswith("/Cloud_computing")


def test_request_id_is_the_header_and_the_body_id(
    simulator: SimulatorHandle, qwen_connector: Factory
) -> None:
    outcome = qwen_connector().submit(sample("best crm", region="cn"))
    intended = _intended(simulator)
    assert outcome.request_id == intended["request_id"]
    assert outcome.upstream_id == intended["request_id"]  # DashScope has no other id
    assert outcome.result is not None
    assert outcome.result.request_id == intended["request_id"]
    assert f'"request_id":"{intended["request_id"]}"'.encode() in outcome.result.raw
    assert outcome.egress == "direct" and outcome.result.status_code == 200


def test_reparse_of_the_captured_transcript_equals_the_live_result(
    simulator: SimulatorHandle, qwen_connector: Factory
) -> None:
    cite_everything(simulator)
    live = qwen_connector().submit(sample("emoji and offsets", region="cn")).result
    assert live is not None
    assert live.raw.startswith(b"id:1\nevent:result\n:HTTP_STATUS/200\ndata:")
    again = QwenConnector.parse(live.raw, content_type=live.raw_mime, sample_id=1)
    again.status_code = live.status_code  # the HTTP status is the exchange's, not the body's
    assert comparable(again) == comparable(live)
    sniffed = QwenConnector.parse(live.raw)  # no content type: recognised as SSE
    assert sniffed.answer_text == live.answer_text and sniffed.citations == live.citations


def test_non_streaming_json_body_parses_the_same(
    simulator: SimulatorHandle, qwen_connector: Factory
) -> None:
    cite_everything(simulator)
    response = _ask(simulator, qwen_connector(), "json please")
    assert response.headers["content-type"].startswith("application/json")
    result = QwenConnector.parse(response.content, content_type=response.headers["content-type"])
    intended = _intended(simulator)
    assert result.collection_state == "completed"
    assert result.answer_text == intended["answer_text"]
    assert result.request_id == response.headers["x-request-id"]
    cited = [result.answer_text[c.start : c.end] for c in result.citations if c.start is not None]
    assert cited == [c["cited_text"] for c in intended["citations"]]


def test_cumulative_frames_without_incremental_output_parse_the_same(
    simulator: SimulatorHandle, qwen_connector: Factory
) -> None:
    cite_everything(simulator)
    connector = qwen_connector()
    body = connector.request_body(sample("cumulative please", region="cn"))
    body["parameters"]["incremental_output"] = False
    response = requests.post(
        f"{simulator.url('qwen')}{PATH}",
        json=body,
        headers={"Authorization": "Bearer k", "X-DashScope-SSE": "enable"},
        timeout=5,
    )
    result = QwenConnector.parse(response.content, content_type=response.headers["content-type"])
    assert result.collection_state == "completed"
    assert result.answer_text == _intended(simulator)["answer_text"]


def test_truncated_stream_is_truncated_not_a_short_answer(
    simulator: SimulatorHandle, qwen_connector: Factory
) -> None:
    simulator.script({"match": "cut me", "fault": "truncate"})
    result = qwen_connector().submit(sample("please cut me off", region="cn")).result
    assert result is not None
    assert result.collection_state == "truncated"
    assert result.evidence_state == "partial"
    assert result.error is not None and result.error["class"] == "truncated"
    assert b"event:result" in result.raw
    assert b'"finish_reason":"stop"' not in result.raw
    assert result.answer_text  # what arrived is kept, but it is not a completed answer
    assert result.request_id is not None


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (500, "InternalError", ErrorClass.TRANSIENT),
        (429, "Throttling.RateQuota", ErrorClass.RATE_LIMITED),
        (400, "DataInspectionFailed", ErrorClass.INVALID),  # unknown code: the status decides
    ],
)
def test_mid_stream_error_event_fails_with_a_classified_error(
    simulator: SimulatorHandle,
    qwen_connector: Factory,
    status: int,
    code: str,
    expected: ErrorClass,
) -> None:
    simulator.script(
        {"match": "break", "fault": "midstream_error", "params": {"status": status, "code": code}}
    )
    result = qwen_connector().submit(sample("break in the middle", region="cn")).result
    assert result is not None
    assert result.collection_state == "failed"
    assert result.error is not None
    assert result.error["class"] == expected.value
    assert result.error["code"] == code and result.error["http_status"] == status
    assert f"event:error\n:HTTP_STATUS/{status}\n".encode() in result.raw


def test_429_is_rate_limited_without_a_hint_and_retried_with_backoff(
    simulator: SimulatorHandle, qwen_connector: Factory
) -> None:
    simulator.script({"match": "busy", "fault": "rate_limit", "times": 1})
    connector = qwen_connector()
    with pytest.raises(UpstreamError) as caught:
        connector.submit(sample("busy hour", region="cn"))
    error = caught.value
    assert error.error_class is ErrorClass.RATE_LIMITED
    assert error.status_code == 429
    assert error.retry_after is None  # DashScope sends no Retry-After
    assert error.request_id is not None and len(error.request_id) == 36
    assert json.loads(error.raw or b"{}")["code"] == "Throttling.RateQuota"
    decision = POLICY.decide(error, attempt_no=1, elapsed_seconds=0, rng=random.Random(0))
    assert decision.retry and decision.delay_seconds >= 0.5

    retried = connector.submit(sample("busy hour", region="cn"), attempt_no=2)
    assert retried.result is not None and retried.result.collection_state == "completed"


@pytest.mark.parametrize(("fault", "status"), [("server_error", 500), ("overloaded", 503)])
def test_5xx_is_transient_and_retried(
    simulator: SimulatorHandle, qwen_connector: Factory, fault: str, status: int
) -> None:
    simulator.script({"match": "flaky", "fault": fault})
    with pytest.raises(UpstreamError) as caught:
        qwen_connector().submit(sample("flaky upstream", region="cn"))
    assert caught.value.error_class is ErrorClass.TRANSIENT
    assert caught.value.status_code == status
    assert POLICY.decide(caught.value, attempt_no=1, elapsed_seconds=0).retry


def test_401_is_auth_and_not_retried_and_the_key_never_leaks(
    simulator: SimulatorHandle, qwen_connector: Factory
) -> None:
    with pytest.raises(UpstreamError) as caught:
        qwen_connector(api_key="invalid-key-xyz").submit(sample("who am i", region="cn"))
    error = caught.value
    assert error.error_class is ErrorClass.AUTH and error.status_code == 401
    assert not POLICY.decide(error, attempt_no=1, elapsed_seconds=0).retry
    assert "invalid-key-xyz" not in str(error) and b"invalid-key-xyz" not in (error.raw or b"")


def test_403_arrearage_is_auth(simulator: SimulatorHandle, qwen_connector: Factory) -> None:
    simulator.script({"match": "unpaid", "fault": "auth_error", "params": {"status": 403}})
    with pytest.raises(UpstreamError) as caught:
        qwen_connector().submit(sample("unpaid bill", region="cn"))
    assert caught.value.error_class is ErrorClass.AUTH and caught.value.status_code == 403
    assert not POLICY.decide(caught.value, attempt_no=1, elapsed_seconds=0).retry


def test_simulator_rejects_a_missing_key_and_a_missing_model(simulator: SimulatorHandle) -> None:
    url = f"{simulator.url('qwen')}{PATH}"
    no_key = requests.post(url, json={"model": "m"}, timeout=5)
    assert no_key.status_code == 401 and no_key.json()["code"] == "InvalidApiKey"
    no_model = requests.post(url, json={}, headers={"Authorization": "Bearer k"}, timeout=5)
    assert no_model.status_code == 400 and no_model.json()["code"] == "InvalidParameter"
    error = QwenConnector._http_error(400, {}, no_model.content, "direct")
    assert error.error_class is ErrorClass.INVALID


def test_login_page_with_200_is_a_parse_failure_sent_to_review(
    simulator: SimulatorHandle, qwen_connector: Factory
) -> None:
    simulator.script({"match": "captcha", "fault": "login_page"})
    result = qwen_connector().submit(sample("captcha time", region="cn")).result
    assert result is not None
    assert result.collection_state == "failed"
    assert result.error is not None and result.error["class"] == "parse_failed"
    assert result.raw.startswith(b"<!DOCTYPE html>")
    assert POLICY.decide(ErrorClass.PARSE_FAILED, attempt_no=1, elapsed_seconds=0).action == REVIEW


def test_hang_past_the_timeout_is_acceptance_unknown(
    simulator: SimulatorHandle, qwen_connector: Factory
) -> None:
    simulator.script({"match": "hang", "fault": "hang", "params": {"hang_seconds": 3}})
    with pytest.raises(UpstreamError) as caught:
        qwen_connector(timeout_seconds=0.3).submit(sample("hang forever", region="cn"))
    assert caught.value.error_class is ErrorClass.ACCEPTANCE_UNKNOWN
    assert POLICY.decide(caught.value, attempt_no=1, elapsed_seconds=0).action == VERIFY


def test_request_body_per_mode(qwen_connector: Factory) -> None:
    connector = qwen_connector()
    web = connector.request_body(sample("q", region="cn"))
    assert web["model"] == "qwen-test"
    assert web["input"] == {"messages": [{"role": "user", "content": "q"}]}
    assert web["parameters"]["enable_search"] is True
    assert web["parameters"]["incremental_output"] is True
    assert web["parameters"]["search_options"]["citation_format"] == "[<number>]"
    assert (
        "enable_search" not in connector.request_body(sample("q", mode="no_search"))["parameters"]
    )
    thinking = connector.request_body(sample("q", mode="deep_thinking"))["parameters"]
    assert thinking["enable_thinking"] is True and thinking["enable_search"] is True


def test_deep_thinking_reasoning_is_not_part_of_the_answer(
    simulator: SimulatorHandle, qwen_connector: Factory
) -> None:
    result = qwen_connector().submit(sample("think hard", region="cn", mode="deep_thinking")).result
    assert result is not None and result.collection_state == "completed"
    assert b"reasoning_content" in result.raw
    assert result.answer_text == _intended(simulator)["answer_text"]


def test_no_search_answer_has_no_citations(
    simulator: SimulatorHandle, qwen_connector: Factory
) -> None:
    cite_everything(simulator)
    result = qwen_connector().submit(sample("offline", region="cn", mode="no_search")).result
    assert result is not None and result.collection_state == "completed"
    assert result.citations == [] and "[1]" not in result.answer_text


def test_capabilities(qwen_connector: Factory) -> None:
    capabilities = qwen_connector().capabilities()
    ok = capabilities.problems(
        device="desktop", region="cn", mode="deep_thinking", screenshot_policy="none"
    )
    assert ok == []
    assert capabilities.problems(
        device="desktop", region="cn", mode="web_search", screenshot_policy="required"
    )
    assert not capabilities.asynchronous and not capabilities.supports_lookup


def test_a_marker_without_a_source_is_flagged_and_finish_length_fails() -> None:
    frame = {
        "output": {
            "choices": [{"finish_reason": "length", "message": {"content": "Acme is fast.[7]"}}],
            "search_info": {"search_results": [{"index": 1, "url": "https://a.example/"}]},
        },
        "request_id": "r-1",
    }
    raw = f"id:1\nevent:result\n:HTTP_STATUS/200\ndata:{json.dumps(frame)}\n\n".encode()
    result = QwenConnector.parse(raw)
    assert result.collection_state == "failed"
    assert result.error is not None and result.error["class"] == "upstream_failed"
    assert "UNRESOLVED_CITATION_MARKER" in result.warnings
    assert [(c.url, c.start) for c in result.citations] == [("https://a.example/", None)]


@pytest.mark.parametrize(
    ("name", "mime"), [("success.sse", "text/event-stream"), ("nonstream.json", "application/json")]
)
def test_fixture_parses_to_the_reviewed_expected_json(name: str, mime: str) -> None:
    raw = (FIXTURES / name).read_bytes()
    expected = json.loads((FIXTURES / f"{name.split('.')[0]}.expected.json").read_text("utf-8"))
    data = comparable(QwenConnector.parse(raw, content_type=mime))
    assert data.pop("raw") == raw.decode("utf-8")
    assert data == expected


def test_truncated_fixture_is_truncated() -> None:
    raw = (FIXTURES / "truncated.sse").read_bytes()
    result = QwenConnector.parse(raw)
    assert result.collection_state == "truncated"
    assert result.error is not None and result.error["class"] == "truncated"
    assert result.raw == raw
