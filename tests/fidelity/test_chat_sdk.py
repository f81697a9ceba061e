"""Chat Completions (OpenAI Chat, DeepSeek): the `openai` SDK (strict) against our adapters.

DeepSeek's official client is the `openai` SDK with DeepSeek's base URL; its vendor switches
(`thinking`) travel as `extra_body`, as DeepSeek's documentation shows.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import openai
import pytest

from simulator import SimulatorHandle

from .harness import ChunksView, Cited, Scenario, Trial, chat_request, each_scenario, sdk_verdict


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
        kwargs: dict[str, Any] = chat_request(self.model(scenario), scenario)
        kwargs["stream_options"] = {"include_usage": True}
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
class SdkView(ChunksView):
    final: Any = None  # the SDK's own accumulation of the chunks
    request_id: str | None = None

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
    with sdk_verdict(SdkView()) as view, client.chat.completions.stream(**kwargs) as stream:
        view.request_id = stream._response.headers.get(header)
        for event in stream:
            if event.type == "chunk":
                view.chunks.append(event.chunk)
        view.final = stream.get_final_completion()
    return view


@each_scenario
@pytest.mark.parametrize("platform", PLATFORMS, ids=[p.key for p in PLATFORMS])
def test_chat_sdk_and_adapter_agree(
    sim: SimulatorHandle, platform: ChatPlatform, scenario: Scenario
) -> None:
    scenario = platform.scenario(scenario)
    trial = Trial(sim, scenario, platform.key, model=platform.model(scenario))
    client = openai.OpenAI(**trial.client_options(path=platform.sdk_path))
    sdk = sdk_call(client, platform.kwargs(scenario), platform.request_id_header)
    ours = trial.replay()
    fault = scenario.fault
    if fault is None:
        searched = platform.search and scenario.mode == "web_search"
        result = trial.assert_answered(sdk.error, sdk.text(), sdk.citations(), searched=searched)
        assert sdk.finish_reason() == "stop"
        assert sdk.usage() is not None and sdk.usage().total_tokens > 0
        assert sdk.chunks[0].id == result.upstream_id
        assert sdk.request_id == ours.request_id
    elif fault == "midstream_error":
        message = getattr(sdk.error, "message", None)
        trial.assert_failed_midstream(sdk.error, openai.APIError, message=message)
    elif fault == "truncate":
        # The SDK ends a stream without [DONE] quietly, with no finish_reason; we say truncated.
        trial.assert_quietly_truncated(sdk.error, sdk.finish_reason(), sdk.text())
    elif trial.refused:
        no_answer = sdk.error is not None or not sdk.chunks
        trial.assert_stainless_refusal(openai, client, sdk.error, no_answer)
        if fault == "rate_limit":
            assert ours.request_id == sdk.error.response.headers.get(platform.request_id_header)
