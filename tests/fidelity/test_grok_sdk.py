"""xAI Grok: the `openai` SDK (strict) pointed at xAI's Responses API, as xAI's own docs use it,
against our adapter.

The oracle is the OpenAI client and not `xai-sdk`: xai-sdk speaks gRPC to `api.x.ai:443` (its
own protobuf chat service), not the REST `/v1/responses` our adapter calls, so it could not read
the bytes our adapter reads; xAI documents the OpenAI SDK with `base_url` "https://api.x.ai/v1"
for the Responses API (docs/decisions.md "Grok through the Responses API").
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from connectors.adapters.grok import GrokConnector
from connectors.base import ErrorClass
from simulator import SimulatorHandle

from .harness import SCENARIOS, EventsView, Scenario, Trial, sdk_verdict
from .test_openai_responses_sdk import sdk_citations

MODEL = "grok-4-1-fast-reasoning"
# Grok offers search or nothing: there is no deep mode to ask for.
GROK_SCENARIOS = [s for s in SCENARIOS if s.mode != "deep_thinking"]
each_grok_scenario = pytest.mark.parametrize(
    "scenario", GROK_SCENARIOS, ids=[s.name for s in GROK_SCENARIOS]
)


def request_kwargs(scenario: Scenario) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"model": MODEL, "input": scenario.question}
    if scenario.mode == "web_search":
        kwargs["tools"] = [{"type": "web_search"}]
    return kwargs


def sdk_call(client: openai.OpenAI, scenario: Scenario) -> EventsView:
    stream_manager = client.responses.stream(**request_kwargs(scenario))
    with sdk_verdict(EventsView()) as view, stream_manager as stream:
        for event in stream:
            view.events.append(event)
        view.final = stream.get_final_response()
    return view


@each_grok_scenario
def test_openai_sdk_on_xai_and_adapter_agree(sim: SimulatorHandle, scenario: Scenario) -> None:
    trial = Trial(sim, scenario, "grok", model=MODEL)
    client = openai.OpenAI(**trial.client_options(path="/v1"))
    sdk = sdk_call(client, scenario)
    trial.replay()
    fault = scenario.fault
    if fault is None:
        check_answer(sdk, trial)
    elif fault == "truncate":
        assert sdk.error is not None and "response.completed" in str(sdk.error), sdk.error
        trial.assert_truncated(
            "".join(e.delta for e in sdk.events if e.type == "response.output_text.delta")
        )
    elif fault == "midstream_error":
        terminal = [e for e in sdk.events if e.type in ("error", "response.failed")]
        assert terminal or sdk.error is not None, "the SDK saw no failure"
        code = None
        if terminal:
            last = terminal[-1]
            code = last.code if last.type == "error" else last.response.error.code
        trial.assert_failed_midstream(code=code or getattr(sdk.error, "code", None))
    elif fault == "rate_limit":
        assert isinstance(sdk.error, openai.RateLimitError), sdk.error
        # xAI documents no retry hint: neither side invents one.
        sdk_wait = client._parse_retry_after_header(sdk.error.response.headers)
        trial.assert_rate_limited(sdk_wait)
        assert sdk_wait is None
    elif fault == "auth_error":
        # xAI answers an incorrect key with a 400; the SDK calls it a bad request, we an
        # authentication failure, both reading the same message.
        assert isinstance(sdk.error, openai.BadRequestError), sdk.error
        assert sdk.error.status_code == 400
        assert trial.ours.error is not None and trial.ours.error.status_code == 400
        assert trial.ours.error_class.value == "auth"  # type: ignore[union-attr]
        assert trial.ours.error.message == sdk.error.body  # the SDK keeps the `error` string
        assert "Incorrect API key provided" in trial.ours.error.message
    elif fault == "login_page":
        trial.assert_login_page(not sdk.events and sdk.error is not None)
    elif fault == "server_error":
        trial.assert_refused(sdk.error, openai.InternalServerError)
        assert trial.ours.error is not None
        assert trial.ours.error.message == sdk.error.body  # type: ignore[union-attr]


def check_answer(sdk: EventsView, trial: Trial) -> None:
    text, cited = sdk_citations(sdk.final) if sdk.error is None else ("", [])
    result = trial.assert_answered(sdk.error, text, cited)
    assert sdk.final.output_text == text
    assert sdk.final.status == "completed"
    assert sdk.final.id == result.upstream_id
    assert sdk.final.usage is not None and sdk.final.usage.total_tokens > 0
    if trial.scenario.mode == "web_search":
        # Inline citations are `[[N]](url)` links in the text, at the annotation's span.
        for citation in cited:
            assert citation.start is not None and citation.end is not None
            link = text[citation.start : citation.end]
            assert link.startswith("[[") and link.endswith(f"]({citation.url})"), link
        # The top-level `citations` (every URL encountered) holds the cited ones and more.
        encountered = sdk.final.model_extra["citations"]
        assert {c.url for c in cited} < set(encountered)
        searches = [item for item in sdk.final.output if item.type == "web_search_call"]
        assert searches and searches[0].action.query
    else:
        assert cited == [] and not sdk.final.model_extra["citations"]


def test_live_search_parameters_are_gone(sim: SimulatorHandle) -> None:
    """The retired Live Search: `search_parameters` is a 410, as xAI answers it today."""
    trial = Trial(sim, Scenario("gone"), "grok", model=MODEL)
    client = openai.OpenAI(**trial.client_options(path="/v1"))
    with pytest.raises(openai.APIStatusError) as raised:
        client.responses.create(
            model=MODEL, input="q", extra_body={"search_parameters": {"mode": "on"}}
        )
    assert raised.value.status_code == 410
    assert "Agent Tools API" in str(raised.value.body)


def test_a_missing_key_is_a_401_that_our_adapter_calls_auth(sim: SimulatorHandle) -> None:
    response = httpx.post(sim.url("grok") + "/v1/responses", json={"model": MODEL, "input": "q"})
    assert response.status_code == 401 and isinstance(response.json()["error"], str)
    error = GrokConnector._http_error(401, dict(response.headers), response.content, egress="x")
    assert error.error_class is ErrorClass.AUTH
    assert error.message == response.json()["error"]
