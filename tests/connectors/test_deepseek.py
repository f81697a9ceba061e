"""Contract tests: DeepSeek's classic chat API against the simulator over real HTTP."""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import pytest
import requests

from connectors.adapters.deepseek import DeepSeekConnector
from connectors.base import ErrorClass, UpstreamError
from connectors.retry import REVIEW, VERIFY
from connectors.simulator import SimulatorHandle

from .conftest import connector_factory, sample
from .contract import POLICY

Factory = Callable[..., DeepSeekConnector]


@pytest.fixture
def deepseek_connector(simulator: SimulatorHandle) -> Factory:
    return connector_factory(
        DeepSeekConnector,
        simulator,
        "deepseek",
        api_key="sk-deepseek-secret-321",
        model="deepseek-chat",
    )


def _intended(simulator: SimulatorHandle) -> dict:
    return simulator.answers("deepseek")[-1]


@pytest.mark.parametrize(
    "question", ["Which CRM is best for a small team?", "哪个CRM最适合小团队？"]
)
def test_answer_completes_and_keep_alive_comments_are_ignored(
    simulator: SimulatorHandle, deepseek_connector: Factory, question: str
) -> None:
    simulator.configure(profile={"emoji_rate": 1.0})
    outcome = deepseek_connector().submit(sample(question, mode="no_search"))
    result = outcome.result
    intended = _intended(simulator)
    assert result is not None
    assert result.collection_state == "completed" and result.error is None
    assert result.answer_text == intended["answer_text"]
    assert any(ord(ch) > 0xFFFF for ch in result.answer_text)
    assert result.raw.startswith(b": keep-alive\n\n: keep-alive\n\n")
    assert result.citations == []  # the classic API has none
    assert outcome.upstream_id == intended["upstream_id"]
    assert outcome.request_id == intended["request_id"]  # x-ds-trace-id
    assert outcome.egress == "direct"


def test_deep_thinking_keeps_the_reasoning_out_of_the_answer(
    simulator: SimulatorHandle, deepseek_connector: Factory
) -> None:
    connector = deepseek_connector()
    assert connector.request_body(sample("q", mode="deep_thinking"))["thinking"] == {
        "type": "enabled"
    }
    assert connector.request_body(sample("q", mode="no_search"))["thinking"] == {"type": "disabled"}
    result = connector.submit(sample("think about CRMs", mode="deep_thinking")).result
    intended = _intended(simulator)
    assert result is not None and result.collection_state == "completed"
    assert intended["reasoning"] and intended["reasoning"][:20] not in result.answer_text
    assert result.answer_text == intended["answer_text"]
    assert b'"reasoning_content": "' in result.raw  # the chain of thought stays in the raw


def test_thinking_model_comes_from_configuration(deepseek_connector: Factory) -> None:
    connector = deepseek_connector(extra={"thinking_model": "deepseek-reasoner"})
    assert connector.request_body(sample("q", mode="deep_thinking"))["model"] == "deepseek-reasoner"
    assert connector.request_body(sample("q", mode="no_search"))["model"] == "deepseek-chat"


def test_web_search_is_rejected_at_plan_time(deepseek_connector: Factory) -> None:
    capabilities = deepseek_connector().capabilities()
    problems = capabilities.problems(
        device="desktop", region="cn", mode="web_search", screenshot_policy="optional"
    )
    assert len(problems) == 1 and "web_search" in problems[0]
    assert (
        capabilities.problems(
            device="desktop", region="cn", mode="deep_thinking", screenshot_policy="optional"
        )
        == []
    )
    assert not capabilities.screenshots and not capabilities.supports_lookup


def test_reparse_of_the_captured_transcript_equals_the_live_result(
    simulator: SimulatorHandle, deepseek_connector: Factory
) -> None:
    live = deepseek_connector().submit(sample("reparse me", mode="deep_thinking")).result
    assert live is not None
    again = DeepSeekConnector.parse(live.raw, content_type=live.raw_mime, sample_id=1)
    for name in ("answer_text", "collection_state", "evidence_state", "upstream_id", "error"):
        assert getattr(again, name) == getattr(live, name)
    assert DeepSeekConnector.parse(live.raw).answer_text == live.answer_text  # sniffed as SSE


def test_non_streaming_body_padded_with_blank_lines_parses(simulator: SimulatorHandle) -> None:
    response = requests.post(
        f"{simulator.url('deepseek')}/chat/completions",
        json={"model": "deepseek-reasoner", "messages": [{"role": "user", "content": "json"}]},
        headers={"Authorization": "Bearer sk-1"},
        timeout=5,
    )
    assert response.content.startswith(b"\n\n{")
    result = DeepSeekConnector.parse(
        response.content, content_type=response.headers["content-type"]
    )
    assert result.collection_state == "completed"
    assert result.answer_text == _intended(simulator)["answer_text"]
    assert json.loads(response.content)["choices"][0]["message"]["reasoning_content"]


def test_truncated_stream_is_truncated(
    simulator: SimulatorHandle, deepseek_connector: Factory
) -> None:
    simulator.script({"match": "cut me", "fault": "truncate"})
    result = deepseek_connector().submit(sample("please cut me off", mode="no_search")).result
    assert result is not None
    assert result.collection_state == "truncated" and result.evidence_state == "partial"
    assert result.error is not None and result.error["class"] == "truncated"
    assert b"[DONE]" not in result.raw


def test_mid_stream_error_fails_with_a_classified_error(
    simulator: SimulatorHandle, deepseek_connector: Factory
) -> None:
    simulator.script({"match": "break", "fault": "midstream_error"})
    result = deepseek_connector().submit(sample("break in the middle", mode="no_search")).result
    assert result is not None and result.collection_state == "failed"
    assert result.error is not None and result.error["class"] == ErrorClass.TRANSIENT.value


def test_429_without_a_hint_backs_off_and_the_retry_succeeds(
    simulator: SimulatorHandle, deepseek_connector: Factory
) -> None:
    simulator.script({"match": "busy", "fault": "rate_limit"})
    connector = deepseek_connector()
    with pytest.raises(UpstreamError) as caught:
        connector.submit(sample("busy hour", mode="no_search"))
    error = caught.value
    assert error.error_class is ErrorClass.RATE_LIMITED and error.status_code == 429
    assert error.retry_after is None  # DeepSeek sends none
    assert error.request_id is not None  # x-ds-trace-id, even on errors
    decision = POLICY.decide(error, attempt_no=1, elapsed_seconds=0, rng=random.Random(0))
    assert decision.retry and 0.5 <= decision.delay_seconds <= 1.0  # backoff with jitter
    retried = connector.submit(sample("busy hour", mode="no_search"), attempt_no=2)
    assert retried.result is not None and retried.result.collection_state == "completed"


@pytest.mark.parametrize(("fault", "status"), [("server_error", 500), ("overloaded", 503)])
def test_5xx_is_transient_and_retried(
    simulator: SimulatorHandle, deepseek_connector: Factory, fault: str, status: int
) -> None:
    simulator.script({"match": "flaky", "fault": fault})
    with pytest.raises(UpstreamError) as caught:
        deepseek_connector().submit(sample("flaky upstream", mode="no_search"))
    assert caught.value.error_class is ErrorClass.TRANSIENT
    assert caught.value.status_code == status
    assert POLICY.decide(caught.value, attempt_no=1, elapsed_seconds=0).retry


def test_401_is_auth_not_retried_and_the_key_is_not_leaked(
    simulator: SimulatorHandle, deepseek_connector: Factory
) -> None:
    with pytest.raises(UpstreamError) as caught:
        deepseek_connector(api_key="invalid-deepseek-key").submit(sample("who", mode="no_search"))
    error = caught.value
    assert error.error_class is ErrorClass.AUTH and error.status_code == 401
    assert "Authentication Fails" in error.message
    assert "invalid-deepseek-key" not in str(error)
    assert b"invalid-deepseek-key" not in (error.raw or b"")
    assert not POLICY.decide(error, attempt_no=1, elapsed_seconds=0).retry


def test_402_insufficient_balance_is_not_retried(
    simulator: SimulatorHandle, deepseek_connector: Factory
) -> None:
    simulator.script({"match": "broke", "fault": "auth_error", "params": {"status": 402}})
    with pytest.raises(UpstreamError) as caught:
        deepseek_connector().submit(sample("broke account", mode="no_search"))
    assert caught.value.error_class is ErrorClass.AUTH and caught.value.status_code == 402
    assert not POLICY.decide(caught.value, attempt_no=1, elapsed_seconds=0).retry


def test_login_page_is_a_parse_failure(
    simulator: SimulatorHandle, deepseek_connector: Factory
) -> None:
    simulator.script({"match": "captcha", "fault": "login_page"})
    result = deepseek_connector().submit(sample("captcha", mode="no_search")).result
    assert result is not None and result.error is not None
    assert result.error["class"] == "parse_failed"
    assert POLICY.decide(ErrorClass.PARSE_FAILED, attempt_no=1, elapsed_seconds=0).action == REVIEW


def test_hang_is_acceptance_unknown(
    simulator: SimulatorHandle, deepseek_connector: Factory
) -> None:
    simulator.script({"match": "hang", "fault": "hang", "params": {"hang_seconds": 3}})
    with pytest.raises(UpstreamError) as caught:
        deepseek_connector(timeout_seconds=0.3).submit(sample("hang", mode="no_search"))
    assert caught.value.error_class is ErrorClass.ACCEPTANCE_UNKNOWN
    assert POLICY.decide(caught.value, attempt_no=1, elapsed_seconds=0).action == VERIFY


def test_simulator_rejects_unknown_tool_types_with_422(simulator: SimulatorHandle) -> None:
    response = requests.post(
        f"{simulator.url('deepseek')}/v1/chat/completions",
        json={"model": "deepseek-chat", "messages": [{"role": "user", "content": "q"}],
              "tools": [{"type": "deepseek_web_search"}]},
        headers={"Authorization": "Bearer sk-1"},
        timeout=5,
    )  # fmt: skip
    assert response.status_code == 422
