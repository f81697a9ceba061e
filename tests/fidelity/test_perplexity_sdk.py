"""Perplexity Sonar: the `perplexityai` SDK (strict) against our adapter.

Perplexity gives no offsets: the SDK exposes the answer with inline `[n]` markers and the
`search_results` they point into (1-based), so citations compare as (url, title) in marker order.
"""

from __future__ import annotations

from typing import Any

import perplexity

from simulator import SimulatorHandle

from .harness import (
    CITATION_MARKER,
    ChunksView,
    Cited,
    Scenario,
    Trial,
    chat_request,
    each_scenario,
    sdk_verdict,
)

MODEL = "sonar-pro"


def request_kwargs(scenario: Scenario) -> dict[str, Any]:
    """Our options, expressed in the SDK's own request parameters."""
    kwargs: dict[str, Any] = chat_request(MODEL, scenario)
    if scenario.mode == "no_search":
        kwargs["disable_search"] = True
    else:
        kwargs["web_search_options"] = {"user_location": {"country": scenario.region.upper()}}
    return kwargs


class SdkView(ChunksView):
    def citations(self) -> list[Cited]:
        results = next((c.search_results for c in reversed(self.chunks) if c.search_results), [])
        found = []
        for match in CITATION_MARKER.finditer(self.text()):
            number = int(match.group(1))
            if 1 <= number <= len(results):
                found.append(Cited(results[number - 1].url, results[number - 1].title))
        return found

    def uncited(self) -> list[str]:
        """The search results no marker points at (found, not cited)."""
        results = next((c.search_results for c in reversed(self.chunks) if c.search_results), [])
        marked = {int(m.group(1)) for m in CITATION_MARKER.finditer(self.text())}
        return [r.url for number, r in enumerate(results, 1) if number not in marked]


def sdk_call(client: perplexity.Perplexity, scenario: Scenario) -> SdkView:
    with sdk_verdict(SdkView()) as view:
        for chunk in client.chat.completions.create(stream=True, **request_kwargs(scenario)):
            view.chunks.append(chunk)
    return view


@each_scenario
def test_perplexity_sdk_and_adapter_agree(sim: SimulatorHandle, scenario: Scenario) -> None:
    trial = Trial(sim, scenario, "perplexity", model=MODEL)
    client = perplexity.Perplexity(**trial.client_options())
    sdk = sdk_call(client, scenario)
    trial.replay()
    fault = scenario.fault
    if fault is None:
        result = trial.assert_answered(sdk.error, sdk.text(), sdk.citations(), offsets=False)
        assert sdk.finish_reason() == "stop"
        assert sdk.chunks[0].id == result.upstream_id
        usage = next(c.usage for c in reversed(sdk.chunks) if c.usage)
        assert usage.total_tokens > 0
        assert [c.url for c in result.found] == sdk.uncited()
        assert result.search_queries == []  # Sonar does not say what it searched
    elif fault == "truncate":
        trial.assert_quietly_truncated(sdk.error, sdk.finish_reason(), sdk.text())
    elif fault == "midstream_error":
        trial.assert_failed_midstream(sdk.error, perplexity.APIError)
    elif trial.refused:
        no_answer = sdk.error is not None or not sdk.chunks
        trial.assert_stainless_refusal(perplexity, client, sdk.error, no_answer)
