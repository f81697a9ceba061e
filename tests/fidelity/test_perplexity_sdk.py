"""Perplexity Sonar: the `perplexityai` SDK (strict) against our adapter.

Perplexity gives no offsets: the SDK exposes the answer with inline `[n]` markers and the
`search_results` they point into (1-based), so citations compare as (url, title) in marker order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import httpx
import perplexity
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

MODEL = "sonar-pro"
MARKER = re.compile(r"\[(\d+)\]")


def request_kwargs(scenario: Scenario) -> dict[str, Any]:
    """Our options, expressed in the SDK's own request parameters."""
    kwargs: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": scenario.question}],
    }
    if scenario.mode == "no_search":
        kwargs["disable_search"] = True
    else:
        kwargs["web_search_options"] = {"user_location": {"country": scenario.region.upper()}}
    return kwargs


@dataclass
class SdkView:
    chunks: list[Any] = field(default_factory=list)
    error: Exception | None = None

    def text(self) -> str:
        return "".join(c.choices[0].delta.content or "" for c in self.chunks if c.choices)

    def finish_reason(self) -> str | None:
        reasons = [c.choices[0].finish_reason for c in self.chunks if c.choices]
        return next((r for r in reversed(reasons) if r), None)

    def citations(self) -> list[Cited]:
        results = next((c.search_results for c in reversed(self.chunks) if c.search_results), [])
        found = []
        for match in MARKER.finditer(self.text()):
            number = int(match.group(1))
            if 1 <= number <= len(results):
                found.append(Cited(results[number - 1].url, results[number - 1].title))
        return found


def sdk_call(client: perplexity.Perplexity, scenario: Scenario) -> SdkView:
    view = SdkView()
    try:
        for chunk in client.chat.completions.create(stream=True, **request_kwargs(scenario)):
            view.chunks.append(chunk)
    except Exception as error:  # the SDK's own verdict is what we compare
        view.error = error
    return view


@pytest.mark.parametrize("scenario", SCENARIOS, ids=SCENARIO_IDS)
def test_perplexity_sdk_and_adapter_agree(sim: SimulatorHandle, scenario: Scenario) -> None:
    prepare(sim, scenario, "perplexity")
    recorder = Recorder()
    client = perplexity.Perplexity(
        api_key=API_KEY,
        base_url=sim.url("perplexity"),
        http_client=recorder.client(httpx),
        max_retries=0,
        _strict_response_validation=True,
    )
    sdk = sdk_call(client, scenario)
    assert len(recorder.exchanges) == 1
    ours = replay("perplexity", sim, scenario, recorder.exchanges, model=MODEL)
    assert ours.sent_json() == recorder.exchanges[0].request_json()
    fault = scenario.fault
    if fault is None:
        assert sdk.error is None, f"the SDK rejected the simulator's answer: {sdk.error!r}"
        result = assert_answered(ours)
        assert sdk.text() == result.answer_text
        assert sdk.citations() == our_citations(result, offsets=False)
        assert sdk.finish_reason() == "stop"
        assert sdk.chunks[0].id == result.upstream_id
        usage = next(c.usage for c in reversed(sdk.chunks) if c.usage)
        assert usage.total_tokens > 0
        if scenario.mode != "no_search":
            assert result.citations, "a search answer with no citations proves nothing"
    elif fault == "truncate":
        assert sdk.error is None and sdk.finish_reason() is None
        assert_truncated(ours, sdk.text())
    elif fault == "midstream_error":
        assert isinstance(sdk.error, perplexity.APIError), sdk.error
        assert ours.result is not None and ours.result.collection_state == "failed"
        assert ours.error_class is ErrorClass.TRANSIENT
    elif fault == "rate_limit":
        assert isinstance(sdk.error, perplexity.RateLimitError), sdk.error
        hint = client._parse_retry_after_header(sdk.error.response.headers)
        assert ours.error_class is ErrorClass.RATE_LIMITED
        assert ours.error is not None and ours.error.retry_after == hint
    elif fault == "auth_error":
        assert_refusal(fault, sdk.error, perplexity.AuthenticationError, ours)
    elif fault == "login_page":
        assert sdk.error is not None or not sdk.chunks
        assert ours.error_class is ErrorClass.PARSE_FAILED
    elif fault == "server_error":
        assert_refusal(fault, sdk.error, perplexity.InternalServerError, ours)
