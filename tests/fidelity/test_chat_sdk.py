"""Chat Completions (OpenAI Chat, DeepSeek): the `openai` SDK (strict) against our adapters.

DeepSeek's official client is the `openai` SDK with DeepSeek's base URL; its vendor switches
(`thinking`) travel as `extra_body`, as DeepSeek's documentation shows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import httpx
import openai
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


@dataclass(frozen=True)
class ChatPlatform:
    key: str
    sdk_path: str  # appended to the simulator URL for the SDK's base_url
    request_id_header: str
    search: bool

    def model(self, scenario: Scenario) -> str:
        if self.key == "deepseek":
            return "deepseek-v4"
        return "gpt-4o-search-preview" if scenario.mode == "web_search" else "gpt-5.1"

    def scenario(self, scenario: Scenario) -> Scenario:
        """DeepSeek has no search mode: its search scenarios are asked without search."""
        if not self.search and scenario.mode == "web_search":
            return dataclasses.replace(scenario, mode="no_search")
        return scenario

    def kwargs(self, scenario: Scenario) -> dict[str, Any]:
        """Our options, expressed in the SDK's own request parameters."""
        kwargs: dict[str, Any] = {
            "model": self.model(scenario),
            "messages": [{"role": "user", "content": scenario.question}],
            "stream_options": {"include_usage": True},
        }
        if self.key == "deepseek":
            thinking = "enabled" if scenario.mode == "deep_thinking" else "disabled"
            kwargs["extra_body"] = {"thinking": {"type": thinking}}
        elif scenario.mode == "web_search":
            country = {"country": scenario.region.upper()}
            kwargs["web_search_options"] = {
                "user_location": {"type": "approximate", "approximate": country}
            }
        elif scenario.mode == "deep_thinking":
            kwargs["reasoning_effort"] = "high"
        return kwargs


PLATFORMS = [
    ChatPlatform("openai_chat", "/v1", "x-request-id", search=True),
    ChatPlatform("deepseek", "", "x-ds-trace-id", search=False),
]


@dataclass
class SdkView:
    chunks: list[Any] = field(default_factory=list)
    final: Any = None  # the SDK's own accumulation of the chunks
    error: Exception | None = None
    request_id: str | None = None

    def text(self) -> str:
        return "".join(c.choices[0].delta.content or "" for c in self.chunks if c.choices)

    def finish_reason(self) -> str | None:
        reasons = [c.choices[0].finish_reason for c in self.chunks if c.choices]
        return next((r for r in reversed(reasons) if r), None)

    def usage(self) -> Any:
        return next((c.usage for c in reversed(self.chunks) if c.usage), None)

    def citations(self) -> list[Cited]:
        notes = self.final.choices[0].message.annotations or []
        return [
            Cited(n.url_citation.url, n.url_citation.title, n.url_citation.start_index,
                  n.url_citation.end_index)
            for n in notes
        ]  # fmt: skip


def sdk_call(client: openai.OpenAI, kwargs: dict[str, Any], header: str) -> SdkView:
    view = SdkView()
    try:
        with client.chat.completions.stream(**kwargs) as stream:
            view.request_id = stream._response.headers.get(header)
            for event in stream:
                if event.type == "chunk":
                    view.chunks.append(event.chunk)
            view.final = stream.get_final_completion()
    except Exception as error:  # the SDK's own verdict is what we compare
        view.error = error
    return view


@pytest.mark.parametrize("scenario", SCENARIOS, ids=SCENARIO_IDS)
@pytest.mark.parametrize("platform", PLATFORMS, ids=[p.key for p in PLATFORMS])
def test_chat_sdk_and_adapter_agree(
    sim: SimulatorHandle, platform: ChatPlatform, scenario: Scenario
) -> None:
    scenario = platform.scenario(scenario)
    prepare(sim, scenario, platform.key)
    recorder = Recorder()
    client = openai.OpenAI(
        api_key=API_KEY,
        base_url=sim.url(platform.key) + platform.sdk_path,
        http_client=recorder.client(httpx),
        max_retries=0,
        _strict_response_validation=True,
    )
    sdk = sdk_call(client, platform.kwargs(scenario), platform.request_id_header)
    assert len(recorder.exchanges) == 1
    model = platform.model(scenario)
    ours = replay(platform.key, sim, scenario, recorder.exchanges, model=model)
    assert ours.sent_json() == recorder.exchanges[0].request_json()
    fault = scenario.fault
    if fault is None:
        assert sdk.error is None, f"the SDK rejected the simulator's answer: {sdk.error!r}"
        result = assert_answered(ours)
        assert sdk.text() == result.answer_text
        assert sdk.citations() == our_citations(result)
        assert sdk.finish_reason() == "stop"
        assert sdk.usage() is not None and sdk.usage().total_tokens > 0
        assert sdk.chunks[0].id == result.upstream_id
        assert sdk.request_id == ours.request_id
        if platform.search and scenario.mode == "web_search":
            assert result.citations, "a search answer with no citations proves nothing"
    elif fault == "truncate":
        # The SDK ends a stream without [DONE] quietly, with no finish_reason; we say truncated.
        assert sdk.error is None and sdk.finish_reason() is None
        assert_truncated(ours, sdk.text())
    elif fault == "midstream_error":
        assert isinstance(sdk.error, openai.APIError), sdk.error
        assert ours.result is not None and ours.result.collection_state == "failed"
        assert ours.result.error is not None
        assert ours.result.error["message"] == sdk.error.message
        assert ours.error_class is ErrorClass.TRANSIENT
    elif fault == "rate_limit":
        assert isinstance(sdk.error, openai.RateLimitError), sdk.error
        hint = client._parse_retry_after_header(sdk.error.response.headers)
        assert ours.error_class is ErrorClass.RATE_LIMITED
        assert ours.error is not None and ours.error.retry_after == hint
        assert ours.request_id == sdk.error.response.headers.get(platform.request_id_header)
    elif fault == "auth_error":
        assert_refusal(fault, sdk.error, openai.AuthenticationError, ours)
    elif fault == "login_page":
        assert sdk.error is not None or not sdk.chunks
        assert ours.error_class is ErrorClass.PARSE_FAILED
    elif fault == "server_error":
        assert_refusal(fault, sdk.error, openai.InternalServerError, ours)
