"""Qwen on DashScope's native API: the `dashscope` SDK against our adapter.

The SDK speaks `requests` and reports errors as responses (`status_code`, `code`, `message`)
rather than exceptions; it has no strict mode. Citations are `[n]` markers into
`output.search_info.search_results[index=n]`, with no offsets: they compare as (url, title).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import dashscope
import pytest

from connectors.base import ErrorClass
from connectors.simulator import SimulatorHandle

from .harness import (
    API_KEY,
    SCENARIO_IDS,
    SCENARIOS,
    Cited,
    Scenario,
    assert_answered,
    assert_truncated,
    our_citations,
    prepare,
    recording_requests,
    replay,
)

MODEL = "qwen-plus"
MARKER = re.compile(r"\[(\d+)\]")


def request_kwargs(scenario: Scenario) -> dict[str, Any]:
    """Our options, expressed in the SDK's own call parameters."""
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": scenario.question}],
        "result_format": "message",
        "incremental_output": True,
    }
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
        numbers = [int(m.group(1)) for m in MARKER.finditer(self.text())]
        cited = [n for n in numbers if n in sources]
        # Our adapter keeps the sources no marker names too, after the cited ones, unplaced.
        cited += sorted(set(sources) - set(cited))
        return [Cited(sources[n]["url"], sources[n]["title"]) for n in cited]


def sdk_call(base_url: str, scenario: Scenario) -> SdkView:
    view = SdkView()
    try:
        dashscope.base_http_api_url = base_url
        frames = dashscope.Generation.call(api_key=API_KEY, stream=True, **request_kwargs(scenario))
        view.frames = list(frames)
    except Exception as error:  # the SDK's own verdict is what we compare
        view.error = error
    return view


@pytest.mark.parametrize("scenario", SCENARIOS, ids=SCENARIO_IDS)
def test_dashscope_sdk_and_adapter_agree(
    sim: SimulatorHandle, scenario: Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepare(sim, scenario, "qwen")
    with recording_requests(monkeypatch) as exchanges:
        sdk = sdk_call(sim.url("qwen") + "/api/v1", scenario)
    assert len(exchanges) == 1
    ours = replay("qwen", sim, scenario, exchanges, model=MODEL)
    assert ours.sent_json() == exchanges[0].request_json()
    fault = scenario.fault
    if fault is None:
        assert sdk.error is None, f"the SDK failed on the simulator's answer: {sdk.error!r}"
        assert sdk.frames and len(sdk.ok) == len(sdk.frames), sdk.frames[-1]
        result = assert_answered(ours)
        assert sdk.text() == result.answer_text
        assert sdk.citations() == our_citations(result, offsets=False)
        assert sdk.finish_reason() == "stop"
        assert sdk.frames[-1].request_id == ours.request_id
        assert sdk.frames[-1].usage.total_tokens > 0
        if scenario.mode != "no_search":
            assert result.citations, "a search answer with no citations proves nothing"
    elif fault == "truncate":
        assert sdk.finish_reason() is None
        assert_truncated(ours, sdk.text())
    elif fault == "midstream_error":
        last = sdk.frames[-1]
        assert last.status_code != HTTPStatus.OK, last
        assert ours.result is not None and ours.result.collection_state == "failed"
        assert ours.result.error is not None and ours.result.error["code"] == last.code
    elif fault in ("rate_limit", "auth_error", "server_error"):
        status = {"rate_limit": 429, "auth_error": 401, "server_error": 500}[fault]
        expected = {
            "rate_limit": ErrorClass.RATE_LIMITED,
            "auth_error": ErrorClass.AUTH,
            "server_error": ErrorClass.TRANSIENT,
        }[fault]
        (frame,) = sdk.frames
        assert frame.status_code == status, frame
        assert ours.error_class is expected
        assert ours.error is not None and ours.error.message == frame.message
        assert ours.request_id == frame.request_id
    elif fault == "login_page":
        assert sdk.error is not None or not sdk.ok
        assert ours.error_class is ErrorClass.PARSE_FAILED
