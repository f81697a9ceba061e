"""The OpenAI Responses adapter against the simulator over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import pytest
import requests

from connectors.adapters.openai_responses import OpenAIResponsesConnector
from connectors.base import ErrorClass, UpstreamError
from connectors.retry import REVIEW, VERIFY
from connectors.simulator import SimulatorHandle

from .conftest import sample
from .contract import POLICY, cite_everything

Factory = Callable[..., OpenAIResponsesConnector]


def _intended(simulator: SimulatorHandle) -> dict:
    return simulator.answers("openai")[-1]


@pytest.mark.parametrize(
    "question",
    ["Which cloud provider is best for startups?", "哪家云服务最适合初创公司？"],
)
def test_citations_point_at_the_cited_span_including_cjk_and_emoji(
    simulator: SimulatorHandle, openai_connector: Factory, question: str
) -> None:
    cite_everything(simulator)
    outcome = openai_connector().submit(sample(question))
    result = outcome.result
    intended = _intended(simulator)

    assert result is not None
    assert result.collection_state == "completed"
    assert result.error is None
    assert result.answer_text == intended["answer_text"]
    assert any(ord(ch) > 0xFFFF for ch in result.answer_text)  # emoji outside the BMP
    assert len(result.citations) == len(intended["citations"]) >= 4
    for citation, expected in zip(result.citations, intended["citations"], strict=True):
        assert citation.url == expected["url"]
        assert result.answer_text[citation.start : citation.end] == expected["cited_text"]
        assert "utm_" not in citation.normalized_url
    if question.startswith("哪"):
        assert "云" in result.answer_text or "口碑" in result.answer_text


def test_submit_records_ids_and_egress(
    simulator: SimulatorHandle, openai_connector: Factory
) -> None:
    outcome = openai_connector().submit(sample("best crm"))
    intended = _intended(simulator)
    assert outcome.upstream_id == intended["upstream_id"]
    assert outcome.upstream_id.startswith("resp_")
    assert outcome.request_id == intended["request_id"]
    assert outcome.result is not None and outcome.result.request_id == intended["request_id"]
    assert outcome.egress == "direct"
    assert outcome.result.sample_id == 1
    assert outcome.result.status_code == 200


def test_reparse_of_the_captured_transcript_equals_the_live_result(
    simulator: SimulatorHandle, openai_connector: Factory
) -> None:
    cite_everything(simulator)
    live = openai_connector().submit(sample("emoji and offsets")).result
    assert live is not None
    assert live.raw.startswith(b"event: response.created")
    again = OpenAIResponsesConnector.parse(live.raw, content_type=live.raw_mime, sample_id=1)
    for name in ("answer_text", "citations", "collection_state", "evidence_state", "upstream_id"):
        assert getattr(again, name) == getattr(live, name)
    sniffed = OpenAIResponsesConnector.parse(live.raw)  # no content type: recognised as SSE
    assert sniffed.answer_text == live.answer_text


def test_non_streaming_json_body_parses_the_same(
    simulator: SimulatorHandle, openai_connector: Factory
) -> None:
    cite_everything(simulator)
    connector = openai_connector()
    body = connector.request_body(sample("json please")) | {"stream": False}
    response = requests.post(
        f"{simulator.url('openai')}/v1/responses",
        json=body,
        headers={"Authorization": "Bearer k"},
        timeout=5,
    )
    result = OpenAIResponsesConnector.parse(
        response.content, content_type=response.headers["content-type"]
    )
    intended = _intended(simulator)
    assert result.collection_state == "completed"
    assert result.answer_text == intended["answer_text"]
    assert [result.answer_text[c.start : c.end] for c in result.citations] == [
        c["cited_text"] for c in intended["citations"]
    ]


def test_truncated_stream_is_truncated_not_a_short_answer(
    simulator: SimulatorHandle, openai_connector: Factory
) -> None:
    simulator.script({"match": "cut me", "fault": "truncate"})
    result = openai_connector().submit(sample("please cut me off")).result
    assert result is not None
    assert result.collection_state == "truncated"
    assert result.error is not None and result.error["class"] == "truncated"
    assert b"response.created" in result.raw
    assert b"response.completed" not in result.raw
    assert result.upstream_id is not None  # known from response.created


@pytest.mark.parametrize("variant", ["error", "response.failed"])
def test_mid_stream_error_fails_with_a_classified_error(
    simulator: SimulatorHandle, openai_connector: Factory, variant: str
) -> None:
    simulator.script({"match": "break", "fault": "midstream_error", "params": {"variant": variant}})
    result = openai_connector().submit(sample("break in the middle")).result
    assert result is not None
    assert result.collection_state == "failed"
    assert result.error is not None
    assert result.error["class"] == ErrorClass.TRANSIENT.value  # code server_error
    assert result.raw  # kept for review


def test_429_hint_is_honoured_and_the_retry_succeeds(
    simulator: SimulatorHandle, openai_connector: Factory
) -> None:
    simulator.script(
        {"match": "busy", "fault": "rate_limit", "times": 1, "params": {"retry_after_seconds": 1.5}}
    )
    connector = openai_connector()
    with pytest.raises(UpstreamError) as caught:
        connector.submit(sample("busy hour"))
    error = caught.value
    assert error.error_class is ErrorClass.RATE_LIMITED
    assert error.status_code == 429
    assert error.retry_after == 1.5  # from retry-after-ms, more precise than retry-after: 2
    assert error.request_id is not None and error.request_id.startswith("req_")

    decision = POLICY.decide(error, attempt_no=1, elapsed_seconds=0, rng=random.Random(0))
    assert decision.retry
    assert decision.delay_seconds >= 1.5

    retried = connector.submit(sample("busy hour"), attempt_no=2)
    assert retried.result is not None and retried.result.collection_state == "completed"


@pytest.mark.parametrize(("fault", "status"), [("server_error", 500), ("overloaded", 503)])
def test_5xx_is_transient_and_retried_with_backoff(
    simulator: SimulatorHandle, openai_connector: Factory, fault: str, status: int
) -> None:
    simulator.script({"match": "flaky", "fault": fault})
    with pytest.raises(UpstreamError) as caught:
        openai_connector().submit(sample("flaky upstream"))
    assert caught.value.error_class is ErrorClass.TRANSIENT
    assert caught.value.status_code == status
    decision = POLICY.decide(caught.value, attempt_no=1, elapsed_seconds=0, rng=random.Random(0))
    assert decision.retry


def test_401_is_auth_and_not_retried(simulator: SimulatorHandle, openai_connector: Factory) -> None:
    with pytest.raises(UpstreamError) as caught:
        openai_connector(api_key="invalid-key").submit(sample("who am i"))
    error = caught.value
    assert error.error_class is ErrorClass.AUTH
    assert not POLICY.decide(error, attempt_no=1, elapsed_seconds=0).retry
    assert "invalid-key" not in str(error) and b"invalid-key" not in (error.raw or b"")


def test_login_page_with_200_is_a_parse_failure_sent_to_review(
    simulator: SimulatorHandle, openai_connector: Factory
) -> None:
    simulator.script({"match": "captcha", "fault": "login_page"})
    result = openai_connector().submit(sample("captcha time")).result
    assert result is not None
    assert result.collection_state == "failed"
    assert result.error is not None and result.error["class"] == "parse_failed"
    assert result.raw.startswith(b"<!DOCTYPE html>")
    decision = POLICY.decide(ErrorClass.PARSE_FAILED, attempt_no=1, elapsed_seconds=0)
    assert decision.action == REVIEW


def test_hang_past_the_timeout_is_acceptance_unknown(
    simulator: SimulatorHandle, openai_connector: Factory
) -> None:
    simulator.script({"match": "hang", "fault": "hang", "params": {"hang_seconds": 3}})
    with pytest.raises(UpstreamError) as caught:
        openai_connector(timeout_seconds=0.3).submit(sample("hang forever"))
    assert caught.value.error_class is ErrorClass.ACCEPTANCE_UNKNOWN
    assert caught.value.egress == "direct"
    decision = POLICY.decide(caught.value, attempt_no=1, elapsed_seconds=0)
    assert decision.action == VERIFY


def test_request_body_per_mode(simulator: SimulatorHandle, openai_connector: Factory) -> None:
    connector = openai_connector()
    web = connector.request_body(sample("q", region="jp"))
    assert web["tools"] == [
        {"type": "web_search", "user_location": {"type": "approximate", "country": "JP"}}
    ]
    assert web["stream"] is True and web["model"] == "gpt-test"
    assert "tools" not in connector.request_body(sample("q", mode="no_search"))
    assert connector.request_body(sample("q", mode="deep_thinking"))["reasoning"] == {
        "effort": "high"
    }


def test_no_search_answer_has_no_citations(
    simulator: SimulatorHandle, openai_connector: Factory
) -> None:
    cite_everything(simulator)
    result = openai_connector().submit(sample("offline", mode="no_search")).result
    assert result is not None and result.collection_state == "completed"
    assert result.citations == []


def test_capabilities_reject_unsupported_targets(openai_connector: Factory) -> None:
    capabilities = openai_connector().capabilities()
    assert (
        capabilities.problems(
            device="api", region="us", mode="web_search", screenshot_policy="none"
        )
        == []
    )
    problems = capabilities.problems(
        device="tablet", region="us", mode="web_search", screenshot_policy="required"
    )
    assert len(problems) == 2
    assert not capabilities.asynchronous and not capabilities.supports_lookup


def test_parse_of_a_failed_json_response() -> None:
    body = json.dumps(
        {"id": "resp_1", "object": "response", "status": "failed", "output": [],
         "error": {"code": "rate_limit_exceeded", "message": "slow"}}
    ).encode()  # fmt: skip
    result = OpenAIResponsesConnector.parse(body, content_type="application/json")
    assert result.collection_state == "failed"
    assert result.error is not None and result.error["class"] == "rate_limited"
    assert result.upstream_id == "resp_1"


def test_stream_stalling_after_the_cut_keeps_the_partial_transcript(
    simulator: SimulatorHandle, openai_connector: Factory
) -> None:
    simulator.script({"match": "stall", "fault": "truncate", "params": {"stall_seconds": 3}})
    outcome = openai_connector(timeout_seconds=0.3).submit(sample("stall mid stream"))
    result = outcome.result
    assert result is not None
    assert result.collection_state == "truncated"
    assert result.error is not None and result.error["class"] == "truncated"
    assert result.error["message"].startswith("stream cut")
    assert result.raw.startswith(b"event: response.created")
    assert outcome.upstream_id.startswith("resp_")  # acceptance is known: the stream began
