"""Ollama: the `ollama` SDK (pydantic `ChatResponse` per NDJSON line) against our adapter.

Ollama's chat API has no search, so the search scenarios are asked without it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import httpx
import ollama
import pytest

from connectors.base import ErrorClass
from connectors.simulator import SimulatorHandle

from .harness import (
    API_KEY,
    SCENARIO_IDS,
    SCENARIOS,
    Recorder,
    Scenario,
    assert_answered,
    assert_truncated,
    prepare,
    replay,
    set_fields,
)

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
    view = SdkView()
    messages = [{"role": "user", "content": scenario.question}]
    think = True if scenario.mode == "deep_thinking" else None
    try:
        for line in client.chat(model=MODEL, messages=messages, stream=True, think=think):
            view.lines.append(line)
    except Exception as error:  # the SDK's own verdict is what we compare
        view.error = error
    return view


@pytest.mark.parametrize("scenario", SCENARIOS, ids=SCENARIO_IDS)
def test_ollama_sdk_and_adapter_agree(sim: SimulatorHandle, scenario: Scenario) -> None:
    if scenario.mode == "web_search":
        scenario = dataclasses.replace(scenario, mode="no_search")
    prepare(sim, scenario, "ollama")
    recorder = Recorder()
    client = ollama.Client(
        host=sim.url("ollama"),
        headers={"Authorization": f"Bearer {API_KEY}"},
        transport=recorder.transport(httpx),
    )
    sdk = sdk_call(client, scenario)
    assert len(recorder.exchanges) == 1
    ours = replay("ollama", sim, scenario, recorder.exchanges, model=MODEL)
    assert set_fields(ours.sent_json()) == set_fields(recorder.exchanges[0].request_json())
    fault = scenario.fault
    if fault is None:
        assert sdk.error is None, f"the SDK rejected the simulator's answer: {sdk.error!r}"
        result = assert_answered(ours)
        assert sdk.text() == result.answer_text
        assert result.citations == []  # Ollama has none
        assert sdk.last.done and sdk.last.done_reason == "stop"
        assert sdk.last.eval_count and sdk.last.prompt_eval_count
    elif fault == "truncate":
        # Cut mid-line, the SDK fails on the partial JSON line; cut between lines, it ends
        # quietly. Either way it never saw `done`, and we call the answer truncated.
        assert sdk.error is None or isinstance(sdk.error, ValueError), sdk.error
        assert not any(line.done for line in sdk.lines)
        assert_truncated(ours, sdk.text())
    elif fault == "midstream_error":
        assert isinstance(sdk.error, ollama.ResponseError), sdk.error
        assert ours.result is not None and ours.result.collection_state == "failed"
        assert ours.result.error is not None
        assert ours.result.error["message"] == sdk.error.error
    elif fault in ("rate_limit", "auth_error", "server_error"):
        status = {"rate_limit": 429, "auth_error": 401, "server_error": 500}[fault]
        expected = {
            "rate_limit": ErrorClass.RATE_LIMITED,
            "auth_error": ErrorClass.AUTH,
            "server_error": ErrorClass.TRANSIENT,
        }[fault]
        assert isinstance(sdk.error, ollama.ResponseError), sdk.error
        assert sdk.error.status_code == status
        assert ours.error_class is expected
        assert ours.error is not None and ours.error.message == sdk.error.error
        assert ours.error.retry_after is None  # Ollama sends no hint
    elif fault == "login_page":
        assert sdk.error is not None or not sdk.lines
        assert ours.error_class is ErrorClass.PARSE_FAILED
