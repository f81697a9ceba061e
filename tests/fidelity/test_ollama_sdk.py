"""Ollama: the `ollama` SDK (pydantic `ChatResponse` per NDJSON line) against our adapter.

Ollama's chat API has no search, so the search scenarios are asked without it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import httpx
import ollama

from simulator import SimulatorHandle

from .harness import API_KEY, Scenario, Trial, each_scenario, sdk_verdict, set_fields

MODEL = "qwen3:8b"


@dataclass
class SdkView:
    lines: list[ollama.ChatResponse] = field(default_factory=list)
    error: Exception | None = None

    def text(self) -> str:
        return "".join(line.message.content or "" for line in self.lines)

    @property
    def last(self) -> ollama.ChatResponse:
        return self.lines[-1]


def sdk_call(client: ollama.Client, scenario: Scenario) -> SdkView:
    messages = [{"role": "user", "content": scenario.question}]
    think = True if scenario.mode == "deep_thinking" else None
    with sdk_verdict(SdkView()) as view:
        for line in client.chat(model=MODEL, messages=messages, stream=True, think=think):
            view.lines.append(line)
    return view


@each_scenario
def test_ollama_sdk_and_adapter_agree(sim: SimulatorHandle, scenario: Scenario) -> None:
    if scenario.mode == "web_search":
        scenario = dataclasses.replace(scenario, mode="no_search")
    trial = Trial(sim, scenario, "ollama", model=MODEL)
    client = ollama.Client(
        host=sim.url("ollama"),
        headers={"Authorization": f"Bearer {API_KEY}"},
        transport=trial.recorder.transport(httpx),
    )
    sdk = sdk_call(client, scenario)
    ours = trial.replay(set_fields)
    fault = scenario.fault
    if fault is None:
        # Ollama has no citations.
        trial.assert_answered(sdk.error, sdk.text(), [], searched=False)
        assert sdk.last.done and sdk.last.done_reason == "stop"
        assert sdk.last.eval_count and sdk.last.prompt_eval_count
    elif fault == "truncate":
        # Cut mid-line, the SDK fails on the partial JSON line; cut between lines, it ends
        # quietly. Either way it never saw `done`, and we call the answer truncated.
        assert sdk.error is None or isinstance(sdk.error, ValueError), sdk.error
        assert not any(line.done for line in sdk.lines)
        trial.assert_truncated(sdk.text())
    elif fault == "midstream_error":
        message = getattr(sdk.error, "error", None)
        trial.assert_failed_midstream(
            sdk.error, ollama.ResponseError, transient=False, message=message
        )
    elif fault in ("rate_limit", "auth_error", "server_error"):
        assert isinstance(sdk.error, ollama.ResponseError), sdk.error
        trial.assert_refused_with(sdk.error.status_code, sdk.error.error)
        assert ours.error is not None and ours.error.retry_after is None  # Ollama sends no hint
    elif fault == "login_page":
        trial.assert_login_page(sdk.error is not None or not sdk.lines)
