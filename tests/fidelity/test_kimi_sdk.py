"""Moonshot Kimi: the `openai` SDK driving the `$web_search` echo loop the way Kimi's
documentation does, against our adapter replaying the same rounds.

Kimi returns no structured citations; both sides only carry the answer text. The SDK runs in
its default (lenient) mode, as in Kimi's documentation: Kimi's round-1 tool call has
`"type": "builtin_function"`, a Kimi extension the strict OpenAI model rejects (it allows only
"function"); docs/decisions.md "SDK conformance suite".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import openai
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState

from simulator import SimulatorHandle

from .harness import SCENARIOS, Scenario, Trial, sdk_verdict, set_fields

MODEL = "kimi-k2.6"
WEB_SEARCH_TOOL = {"type": "builtin_function", "function": {"name": "$web_search"}}
MAX_ROUNDS = 3
# Kimi offers search or nothing: the thinking scenario is asked as a search.
KIMI_SCENARIOS = [s for s in SCENARIOS if s.mode != "deep_thinking"]


@dataclass
class SdkView:
    rounds: list[Any] = field(default_factory=list)  # the SDK's accumulated completion per round
    error: Exception | None = None
    request_id: str | None = None

    @property
    def final(self) -> Any:
        return self.rounds[-1]


def echo(message: Any) -> list[dict[str, Any]]:
    """Kimi's documented loop: the assistant turn, then each call's arguments unchanged."""
    calls = [
        {"id": c.id, "type": c.type, "function": {"name": c.function.name,
         "arguments": c.function.arguments}}
        for c in message.tool_calls
    ]  # fmt: skip
    replies = [
        {"role": "tool", "tool_call_id": c.id, "name": c.function.name,
         "content": c.function.arguments}
        for c in message.tool_calls
    ]  # fmt: skip
    return [{"role": "assistant", "content": message.content or "", "tool_calls": calls}, *replies]


def sdk_call(client: openai.OpenAI, scenario: Scenario) -> SdkView:
    messages: list[dict[str, Any]] = [{"role": "user", "content": scenario.question}]
    extra: dict[str, Any] = {}
    if scenario.mode == "web_search":
        extra = {"tools": [WEB_SEARCH_TOOL], "extra_body": {"thinking": {"type": "disabled"}}}
    with sdk_verdict(SdkView()) as view:
        for _ in range(MAX_ROUNDS):
            stream = client.chat.completions.create(
                model=MODEL, messages=messages, stream=True, **extra
            )
            view.request_id = stream.response.headers.get("msh-request-id")
            state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
            for chunk in stream:
                state.handle_chunk(chunk)
            view.rounds.append(state.current_completion_snapshot)
            choice = view.final.choices[0]
            if choice.finish_reason != "tool_calls":
                break
            messages = [*messages, *echo(choice.message)]
    return view


@pytest.mark.parametrize("scenario", KIMI_SCENARIOS, ids=[s.name for s in KIMI_SCENARIOS])
def test_kimi_sdk_and_adapter_agree(sim: SimulatorHandle, scenario: Scenario) -> None:
    trial = Trial(sim, scenario, "kimi", model=MODEL)
    client = openai.OpenAI(**trial.client_options(path="/v1", strict=False))
    sdk = sdk_call(client, scenario)
    # Every round our adapter sent is the round the SDK's documented loop sent.
    ours = trial.replay(set_fields, rounds=True)
    fault = scenario.fault
    if fault is None:
        message = sdk.final.choices[0].message
        trial.assert_answered(sdk.error, message.content, searched=False)
        assert sdk.final.choices[0].finish_reason == "stop"
        assert sdk.request_id == ours.request_id
        if scenario.mode == "web_search":
            assert len(sdk.rounds) == 2, "the search loop was not exercised"
    elif fault == "truncate":
        assert sdk.final.choices[0].finish_reason is None
        trial.assert_truncated(sdk.final.choices[0].message.content or "")
    elif fault == "midstream_error":
        trial.assert_failed_midstream(sdk.error, openai.APIError, transient=False)
    elif trial.refused:
        no_answer = sdk.error is not None or not sdk.final.choices
        trial.assert_stainless_refusal(openai, client, sdk.error, no_answer)
