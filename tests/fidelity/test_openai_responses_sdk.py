"""OpenAI Responses: the `openai` SDK (strict response validation) against our adapter."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
import openai
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
    our_citations,
    prepare,
    replay,
)

MODEL = "gpt-5.1"


def openai_client(base_url: str, recorder: Recorder) -> openai.OpenAI:
    return openai.OpenAI(
        api_key=API_KEY,
        base_url=base_url,
        http_client=recorder.client(httpx),
        max_retries=0,
        _strict_response_validation=True,
    )


def request_kwargs(scenario: Scenario) -> dict[str, Any]:
    """Our options, expressed in the SDK's own request types."""
    kwargs: dict[str, Any] = {"model": MODEL, "input": scenario.question}
    if scenario.mode != "no_search":
        location = {"type": "approximate", "country": scenario.region.upper()}
        kwargs["tools"] = [{"type": "web_search", "user_location": location}]
    if scenario.mode == "deep_thinking":
        kwargs["reasoning"] = {"effort": "high"}
    return kwargs


@dataclass
class SdkView:
    events: list[Any] = field(default_factory=list)
    final: Any = None
    error: Exception | None = None
    request_id: str | None = None


def sdk_call(client: openai.OpenAI, scenario: Scenario) -> SdkView:
    view = SdkView()
    try:
        with client.responses.stream(**request_kwargs(scenario)) as stream:
            view.request_id = stream._raw_stream.response.headers.get("x-request-id")  # type: ignore[attr-defined]
            for event in stream:
                view.events.append(event)
            view.final = stream.get_final_response()
    except Exception as error:  # the SDK's own verdict is what we compare
        view.error = error
    return view


def sdk_citations(response: Any) -> tuple[str, list[Cited]]:
    text, cited = "", []
    for item in response.output:
        if item.type != "message":
            continue
        for part in item.content:
            if part.type != "output_text":
                continue
            for note in part.annotations:
                if note.type == "url_citation":
                    shift = len(text)
                    cited.append(
                        Cited(
                            note.url, note.title, note.start_index + shift, note.end_index + shift
                        )
                    )
            text += part.text
    return text, cited


@pytest.mark.parametrize("scenario", SCENARIOS, ids=SCENARIO_IDS)
def test_openai_sdk_and_adapter_agree(sim: SimulatorHandle, scenario: Scenario) -> None:
    prepare(sim, scenario, "openai")
    recorder = Recorder()
    sdk = sdk_call(openai_client(sim.url("openai") + "/v1", recorder), scenario)
    assert len(recorder.exchanges) == 1
    ours = replay("openai", sim, scenario, recorder.exchanges, model=MODEL)
    # Request side: our adapter sends what the SDK builds for the same options.
    assert ours.sent_json() == recorder.exchanges[0].request_json()
    check = CHECKS.get(scenario.fault or "answer")
    check(sdk, ours, recorder.exchanges[0])


def check_answer(sdk: SdkView, ours: Any, exchange: Any) -> None:
    assert sdk.error is None, f"the SDK rejected the simulator's answer: {sdk.error!r}"
    result = assert_answered(ours)
    text, cited = sdk_citations(sdk.final)
    assert sdk.final.output_text == text == result.answer_text
    assert our_citations(result) == cited
    assert sdk.final.status == "completed"
    assert sdk.final.id == result.upstream_id
    assert sdk.request_id == ours.request_id == exchange.headers["x-request-id"]
    assert sdk.final.usage is not None and sdk.final.usage.total_tokens > 0


def check_truncated(sdk: SdkView, ours: Any, exchange: Any) -> None:
    # The SDK refuses a stream without `response.completed`; we keep it as truncated.
    assert sdk.error is not None and "response.completed" in str(sdk.error), sdk.error
    assert ours.result is not None and ours.result.collection_state == "truncated"
    deltas = "".join(e.delta for e in sdk.events if e.type == "response.output_text.delta")
    assert ours.result.answer_text == deltas


def check_midstream_error(sdk: SdkView, ours: Any, exchange: Any) -> None:
    terminal = [e for e in sdk.events if e.type in ("error", "response.failed")]
    assert terminal or sdk.error is not None, "the SDK saw no failure"
    assert ours.result is not None and ours.result.collection_state == "failed"
    if terminal and terminal[-1].type == "error":
        code = terminal[-1].code
    elif terminal:
        code = terminal[-1].response.error.code
    else:
        code = getattr(sdk.error, "code", None)
    assert ours.result.error is not None and ours.result.error["code"] == code
    assert ours.error_class is ErrorClass.TRANSIENT


def check_rate_limit(sdk: SdkView, ours: Any, exchange: Any) -> None:
    assert isinstance(sdk.error, openai.RateLimitError), sdk.error
    client = openai.OpenAI(api_key=API_KEY)
    sdk_wait = client._parse_retry_after_header(sdk.error.response.headers)
    assert ours.error_class is ErrorClass.RATE_LIMITED
    assert ours.error.retry_after == sdk_wait == 2.5
    assert ours.request_id == sdk.error.request_id


def check_auth(sdk: SdkView, ours: Any, exchange: Any) -> None:
    assert isinstance(sdk.error, openai.AuthenticationError), sdk.error
    assert ours.error_class is ErrorClass.AUTH
    assert ours.request_id == sdk.error.request_id


def check_login_page(sdk: SdkView, ours: Any, exchange: Any) -> None:
    # An HTML 200 is not an event stream: the SDK sees no event and no completion.
    assert not sdk.events and sdk.error is not None, sdk
    assert ours.result is not None and ours.error_class is ErrorClass.PARSE_FAILED


def check_provider_error(sdk: SdkView, ours: Any, exchange: Any) -> None:
    assert isinstance(sdk.error, openai.InternalServerError), sdk.error
    assert ours.error_class is ErrorClass.TRANSIENT
    assert ours.request_id == sdk.error.request_id


CHECKS = {
    "answer": check_answer,
    "truncate": check_truncated,
    "midstream_error": check_midstream_error,
    "rate_limit": check_rate_limit,
    "auth_error": check_auth,
    "login_page": check_login_page,
    "server_error": check_provider_error,
}
