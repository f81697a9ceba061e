"""Volcengine Ark (Doubao) Responses API: the official Ark runtime SDK
(`volcengine-ark-runtime`, the Ark part of volcengine-python-sdk) against our adapter.

Ark's annotations carry no offsets, so citations compare as (url, title).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import volcenginesdkarkruntime as ark
from volcenginesdkarkruntime import _exceptions as ark_errors

from simulator import SimulatorHandle

from .harness import Cited, Scenario, Trial, each_scenario, sdk_verdict, set_fields

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
    with sdk_verdict(SdkView()) as view:
        stream = client.responses.create(stream=True, **request_kwargs(scenario))
        view.request_id = stream.response.headers.get("x-request-id")
        for event in stream:
            view.events.append(event)
    return view


@each_scenario
def test_ark_sdk_and_adapter_agree(sim: SimulatorHandle, scenario: Scenario) -> None:
    trial = Trial(sim, scenario, "doubao", model=MODEL)
    client = ark.Ark(**trial.client_options(path="/api/v3", strict=False))
    sdk = sdk_call(client, scenario)
    ours = trial.replay(set_fields)
    fault = scenario.fault
    if fault is None:
        result = trial.assert_answered(sdk.error, *sdk.text_and_citations())
        assert sdk.final().status == "completed"
        assert sdk.final().id == result.upstream_id
        assert sdk.final().usage.total_tokens > 0
        assert sdk.request_id == ours.request_id
    elif fault == "truncate":
        assert sdk.final() is None
        trial.assert_truncated(sdk.deltas())
    elif fault == "midstream_error":
        failed = [e for e in sdk.events if e.type in ("error", "response.failed")]
        assert failed or sdk.error is not None, "the SDK saw no failure"
        trial.assert_failed_midstream(transient=False)
    elif fault == "rate_limit":
        trial.assert_refused(sdk.error, ark_errors.ArkRateLimitError)
    elif fault == "auth_error":
        trial.assert_refused(sdk.error, ark_errors.ArkAuthenticationError)
    elif fault == "login_page":
        trial.assert_login_page(sdk.error is not None or sdk.final() is None)
    elif fault == "server_error":
        trial.assert_refused(sdk.error, ark_errors.ArkInternalServerError)
