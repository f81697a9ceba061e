"""Volcengine Ark (Doubao) Responses API: the official Ark runtime SDK
(`volcengine-ark-runtime`, the Ark part of volcengine-python-sdk) against our adapter.

Ark's annotations carry no offsets, so citations compare as (url, title).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import volcenginesdkarkruntime as ark
from volcenginesdkarkruntime import _exceptions as ark_errors

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
    set_fields,
)

MODEL = "doubao-seed-1-6-250615"


def request_kwargs(scenario: Scenario) -> dict[str, Any]:
    """Our options, expressed in the SDK's own request parameters."""
    thinking = "enabled" if scenario.mode == "deep_thinking" else "disabled"
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "input": [{"role": "user", "content": scenario.question}],
        "thinking": {"type": thinking},
    }
    if scenario.mode != "no_search":
        kwargs["tools"] = [{"type": "web_search"}]
    return kwargs


@dataclass
class SdkView:
    events: list[Any] = field(default_factory=list)
    error: Exception | None = None
    request_id: str | None = None

    def final(self) -> Any:
        done = [e for e in self.events if e.type == "response.completed"]
        return done[-1].response if done else None

    def text_and_citations(self) -> tuple[str, list[Cited]]:
        text, cited = "", []
        for item in self.final().output:
            if item.type != "message":
                continue
            for part in item.content:
                if part.type == "output_text":
                    cited += [Cited(a.url, a.title) for a in part.annotations or []]
                    text += part.text
        return text, cited

    def deltas(self) -> str:
        return "".join(e.delta for e in self.events if e.type == "response.output_text.delta")


def sdk_call(client: ark.Ark, scenario: Scenario) -> SdkView:
    view = SdkView()
    try:
        stream = client.responses.create(stream=True, **request_kwargs(scenario))
        view.request_id = stream.response.headers.get("x-request-id")
        for event in stream:
            view.events.append(event)
    except Exception as error:  # the SDK's own verdict is what we compare
        view.error = error
    return view


@pytest.mark.parametrize("scenario", SCENARIOS, ids=SCENARIO_IDS)
def test_ark_sdk_and_adapter_agree(sim: SimulatorHandle, scenario: Scenario) -> None:
    prepare(sim, scenario, "doubao")
    recorder = Recorder()
    client = ark.Ark(
        api_key=API_KEY,
        base_url=sim.url("doubao") + "/api/v3",
        http_client=recorder.client(httpx),
        max_retries=0,
    )
    sdk = sdk_call(client, scenario)
    assert len(recorder.exchanges) == 1
    ours = replay("doubao", sim, scenario, recorder.exchanges, model=MODEL)
    assert set_fields(ours.sent_json()) == set_fields(recorder.exchanges[0].request_json())
    fault = scenario.fault
    if fault is None:
        assert sdk.error is None, f"the SDK rejected the simulator's answer: {sdk.error!r}"
        result = assert_answered(ours)
        text, cited = sdk.text_and_citations()
        assert text == result.answer_text
        assert cited == our_citations(result)
        assert sdk.final().status == "completed"
        assert sdk.final().id == result.upstream_id
        assert sdk.final().usage.total_tokens > 0
        assert sdk.request_id == ours.request_id
        if scenario.mode != "no_search":
            assert result.citations, "a search answer with no citations proves nothing"
    elif fault == "truncate":
        assert sdk.final() is None
        assert_truncated(ours, sdk.deltas())
    elif fault == "midstream_error":
        failed = [e for e in sdk.events if e.type in ("error", "response.failed")]
        assert failed or sdk.error is not None, "the SDK saw no failure"
        assert ours.result is not None and ours.result.collection_state == "failed"
    elif fault == "rate_limit":
        assert_refusal(fault, sdk.error, ark_errors.ArkRateLimitError, ours)
    elif fault == "auth_error":
        assert_refusal(fault, sdk.error, ark_errors.ArkAuthenticationError, ours)
    elif fault == "login_page":
        assert sdk.error is not None or sdk.final() is None
        assert ours.error_class is ErrorClass.PARSE_FAILED
    elif fault == "server_error":
        assert_refusal(fault, sdk.error, ark_errors.ArkInternalServerError, ours)
