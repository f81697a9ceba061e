"""Qwen on DashScope's native API: the `dashscope` SDK against our adapter.

The SDK speaks `requests` and reports errors as responses (`status_code`, `code`, `message`)
rather than exceptions; it has no strict mode. Citations are `[n]` markers into
`output.search_info.search_results[index=n]`, with no offsets: they compare as (url, title).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import dashscope
import pytest

from simulator import SimulatorHandle

from .harness import (
    API_KEY,
    CITATION_MARKER,
    Cited,
    Scenario,
    Trial,
    chat_request,
    each_scenario,
    recording_requests,
    sdk_verdict,
)

MODEL = "qwen-plus"


@dataclass
class SdkView:
    frames: list[Any] = field(default_factory=list)
    error: Exception | None = None

    @property
    def ok(self) -> list[Any]:
        return [f for f in self.frames if f.status_code == HTTPStatus.OK]

    def text(self) -> str:
        return "".join(f.output.choices[0].message.content or "" for f in self.ok)

    def finish_reason(self) -> str | None:
        reasons = [f.output.choices[0].finish_reason for f in self.ok]
        return next((r for r in reversed(reasons) if r and r != "null"), None)

    def citations(self) -> list[Cited]:
        sources: dict[int, Any] = {}
        for frame in self.ok:
            info = frame.output.get("search_info") or {}
            sources |= {s["index"]: s for s in info.get("search_results") or []}
        numbers = [int(m.group(1)) for m in CITATION_MARKER.finditer(self.text())]
        cited = [n for n in numbers if n in sources]
        # Our adapter keeps the sources no marker names too, after the cited ones, unplaced.
        cited += sorted(set(sources) - set(cited))
        return [Cited(sources[n]["url"], sources[n]["title"]) for n in cited]


def request_kwargs(scenario: Scenario) -> dict[str, Any]:
    """Our options, expressed in the SDK's own call parameters."""
    kwargs: dict[str, Any] = chat_request(MODEL, scenario)
    kwargs.update(result_format="message", incremental_output=True)
    if scenario.mode != "no_search":
        kwargs["enable_search"] = True
        kwargs["search_options"] = {
            "enable_source": True,
            "enable_citation": True,
            "citation_format": "[<number>]",
        }
    if scenario.mode == "deep_thinking":
        kwargs["enable_thinking"] = True
    return kwargs


def sdk_call(base_url: str, scenario: Scenario) -> SdkView:
    with sdk_verdict(SdkView()) as view:
        dashscope.base_http_api_url = base_url
        frames = dashscope.Generation.call(api_key=API_KEY, stream=True, **request_kwargs(scenario))
        view.frames = list(frames)
    return view


@each_scenario
def test_dashscope_sdk_and_adapter_agree(
    sim: SimulatorHandle, scenario: Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    trial = Trial(sim, scenario, "qwen", model=MODEL)
    with recording_requests(monkeypatch) as exchanges:
        sdk = sdk_call(sim.url("qwen") + "/api/v1", scenario)
    ours = trial.replay(exchanges=exchanges)
    fault = scenario.fault
    if fault is None:
        trial.assert_answered(sdk.error, sdk.text(), sdk.citations(), offsets=False)
        assert sdk.frames and len(sdk.ok) == len(sdk.frames), sdk.frames[-1]
        assert sdk.finish_reason() == "stop"
        assert sdk.frames[-1].request_id == ours.request_id
        assert sdk.frames[-1].usage.total_tokens > 0
    elif fault == "truncate":
        assert sdk.finish_reason() is None
        trial.assert_truncated(sdk.text())
    elif fault == "midstream_error":
        last = sdk.frames[-1]
        assert last.status_code != HTTPStatus.OK, last
        trial.assert_failed_midstream(transient=False, code=last.code)
    elif fault in ("rate_limit", "auth_error", "server_error"):
        (frame,) = sdk.frames
        trial.assert_refused_with(frame.status_code, frame.message)
        assert ours.request_id == frame.request_id
    elif fault == "login_page":
        trial.assert_login_page(sdk.error is not None or not sdk.ok)
