"""Anthropic Messages: the `anthropic` SDK (strict) against our adapter."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx2
import pytest

from connectors.base import ErrorClass
from connectors.simulator import SimulatorHandle

from .harness import (
    API_KEY,
    SCENARIO_IDS,
    SCENARIOS,
    Cited,
    Recorder,
    Scenario,
    assert_answered,
    assert_refusal,
    assert_truncated,
    our_citations,
    prepare,
    replay,
)

MODEL = "claude-sonnet-4-6"


def request_kwargs(scenario: Scenario) -> dict[str, Any]:
    """Our options, expressed in the SDK's own request parameters."""
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": scenario.question}],
    }
    if scenario.mode != "no_search":
        kwargs["tools"] = [
            {
                "type": "web_search_20250305",
                "name": "web_search",
                "max_uses": 5,
                "user_location": {"type": "approximate", "country": scenario.region.upper()},
            }
        ]
    if scenario.mode == "deep_thinking":
        kwargs["thinking"] = {"type": "enabled", "budget_tokens": 8192}
        kwargs["max_tokens"] = 8192 + 4096
    return kwargs


@dataclass
class SdkView:
    events: list[Any] = field(default_factory=list)
    final: Any = None
    error: Exception | None = None
    request_id: str | None = None

    def text_and_citations(self) -> tuple[str, list[Cited]]:
        """Anthropic gives no offsets: a citation spans the text block that carries it."""
        text, cited = "", []
        for block in self.final.content:
            if block.type != "text":
                continue
            for citation in block.citations or []:
                cited.append(
                    Cited(citation.url, citation.title, len(text), len(text) + len(block.text))
                )
            text += block.text
        return text, cited

    def streamed_text(self) -> str:
        return "".join(e.delta.text for e in self.events if e.type == "content_block_delta"
                       and e.delta.type == "text_delta")  # fmt: skip


def sdk_call(client: anthropic.Anthropic, scenario: Scenario) -> SdkView:
    view = SdkView()
    try:
        with client.messages.stream(**request_kwargs(scenario)) as stream:
            view.request_id = stream.request_id
            for event in stream:
                view.events.append(event)
            view.final = stream.get_final_message()
    except Exception as error:  # the SDK's own verdict is what we compare
        view.error = error
    return view


@pytest.mark.parametrize("scenario", SCENARIOS, ids=SCENARIO_IDS)
def test_anthropic_sdk_and_adapter_agree(sim: SimulatorHandle, scenario: Scenario) -> None:
    prepare(sim, scenario, "anthropic")
    recorder = Recorder()
    client = anthropic.Anthropic(
        api_key=API_KEY,
        base_url=sim.url("anthropic"),
        http_client=recorder.client(httpx2),
        max_retries=0,
        _strict_response_validation=True,
    )
    sdk = sdk_call(client, scenario)
    assert len(recorder.exchanges) == 1
    ours = replay("anthropic", sim, scenario, recorder.exchanges, model=MODEL)
    sent = recorder.exchanges[0].request_json()
    assert ours.sent_json() == sent
    fault = scenario.fault
    if fault is None:
        assert sdk.error is None, f"the SDK rejected the simulator's answer: {sdk.error!r}"
        result = assert_answered(ours)
        text, cited = sdk.text_and_citations()
        assert text == result.answer_text
        assert cited == our_citations(result)
        assert sdk.final.stop_reason == "end_turn"
        assert sdk.final.id == result.upstream_id
        assert sdk.final.usage.output_tokens > 0
        assert sdk.request_id == ours.request_id
        if scenario.mode != "no_search":
            assert result.citations, "a search answer with no citations proves nothing"
    elif fault == "truncate":
        assert sdk.error is None or not isinstance(sdk.error, anthropic.APIStatusError)
        assert not any(e.type == "message_stop" for e in sdk.events)
        assert_truncated(ours, sdk.streamed_text())
    elif fault == "midstream_error":
        assert isinstance(sdk.error, anthropic.APIStatusError | anthropic.APIError), sdk.error
        assert ours.result is not None and ours.result.collection_state == "failed"
        assert ours.result.error is not None
        assert ours.result.error["code"] == sdk.error.body["error"]["type"]
        assert ours.error_class is ErrorClass.TRANSIENT
    elif fault == "rate_limit":
        assert isinstance(sdk.error, anthropic.RateLimitError), sdk.error
        hint = client._parse_retry_after_header(sdk.error.response.headers)
        assert ours.error_class is ErrorClass.RATE_LIMITED
        assert ours.error is not None and ours.error.retry_after == hint
        assert ours.request_id == sdk.error.request_id
    elif fault == "auth_error":
        assert_refusal(fault, sdk.error, anthropic.AuthenticationError, ours)
        assert ours.request_id == sdk.error.request_id
    elif fault == "login_page":
        assert sdk.error is not None or not sdk.events
        assert ours.error_class is ErrorClass.PARSE_FAILED
    elif fault == "server_error":
        assert_refusal(fault, sdk.error, anthropic.InternalServerError, ours)
        assert ours.request_id == sdk.error.request_id
