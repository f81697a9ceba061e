"""OpenAI Responses: the `openai` SDK (strict response validation) against our adapter."""

from __future__ import annotations

from typing import Any

import openai

from simulator import SimulatorHandle

from .harness import API_KEY, Cited, EventsView, Scenario, Trial, each_scenario, sdk_verdict

MODEL = "gpt-5.1"


def request_kwargs(scenario: Scenario) -> dict[str, Any]:
    """Our options, expressed in the SDK's own request types."""
    kwargs: dict[str, Any] = {"model": MODEL, "input": scenario.question}
    if scenario.mode != "no_search":
        location = {"type": "approximate", "country": scenario.region.upper()}
        kwargs["tools"] = [{"type": "web_search", "user_location": location}]
        kwargs["include"] = ["web_search_call.action.sources"]
    if scenario.mode == "deep_thinking":
        kwargs["reasoning"] = {"effort": "high"}
    return kwargs


class SdkView(EventsView):
    pass


def sdk_call(client: openai.OpenAI, scenario: Scenario) -> SdkView:
    stream_manager = client.responses.stream(**request_kwargs(scenario))
    with sdk_verdict(SdkView()) as view, stream_manager as stream:
        view.request_id = stream._raw_stream.response.headers.get("x-request-id")  # type: ignore[attr-defined]
        for event in stream:
            view.events.append(event)
        view.final = stream.get_final_response()
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


@each_scenario
def test_openai_sdk_and_adapter_agree(sim: SimulatorHandle, scenario: Scenario) -> None:
    trial = Trial(sim, scenario, "openai", model=MODEL)
    sdk = sdk_call(openai.OpenAI(**trial.client_options(path="/v1")), scenario)
    # Request side: our adapter sends what the SDK builds for the same options.
    trial.replay()
    check = CHECKS.get(scenario.fault or "answer")
    check(sdk, trial)


def check_answer(sdk: SdkView, trial: Trial) -> None:
    text, cited = sdk_citations(sdk.final) if sdk.error is None else ("", [])
    result = trial.assert_answered(sdk.error, text, cited, searched=False)
    assert sdk.final.output_text == text
    assert sdk.final.status == "completed"
    assert sdk.final.id == result.upstream_id
    exchange = trial.exchanges[0]
    assert sdk.request_id == trial.ours.request_id == exchange.headers["x-request-id"]
    assert sdk.final.usage is not None and sdk.final.usage.total_tokens > 0
    check_searches(sdk.final, result, searched=trial.scenario.mode != "no_search")


def check_searches(response: Any, result: Any, *, searched: bool) -> None:
    """The searches the SDK sees in the web_search_call items (`action.queries`, else
    `action.query`) are the adapter's fan-out; the sources they found that no annotation cites
    are the adapter's found-not-cited sources."""
    calls = [item for item in response.output if item.type == "web_search_call"]
    queries: list[str] = []
    for call in calls:
        for query in [*(call.action.queries or []), call.action.query]:
            if query and query not in queries:
                queries.append(query)
    assert result.search_queries == queries
    assert bool(queries) == searched
    cited = {c.url for c in result.citations}
    sources = [s.url for call in calls for s in call.action.sources or []]
    assert [c.url for c in result.found] == [u for u in dict.fromkeys(sources) if u not in cited]
    assert bool(result.found) == searched


def check_truncated(sdk: SdkView, trial: Trial) -> None:
    # The SDK refuses a stream without `response.completed`; we keep it as truncated.
    assert sdk.error is not None and "response.completed" in str(sdk.error), sdk.error
    trial.assert_truncated(
        "".join(e.delta for e in sdk.events if e.type == "response.output_text.delta")
    )


def check_midstream_error(sdk: SdkView, trial: Trial) -> None:
    terminal = [e for e in sdk.events if e.type in ("error", "response.failed")]
    assert terminal or sdk.error is not None, "the SDK saw no failure"
    if terminal and terminal[-1].type == "error":
        code = terminal[-1].code
    elif terminal:
        code = terminal[-1].response.error.code
    else:
        code = getattr(sdk.error, "code", None)
    trial.assert_failed_midstream(code=code)


def check_rate_limit(sdk: SdkView, trial: Trial) -> None:
    assert isinstance(sdk.error, openai.RateLimitError), sdk.error
    client = openai.OpenAI(api_key=API_KEY)
    sdk_wait = client._parse_retry_after_header(sdk.error.response.headers)
    trial.assert_rate_limited(sdk_wait)
    assert sdk_wait == 2.5
    assert trial.ours.request_id == sdk.error.request_id


def check_auth(sdk: SdkView, trial: Trial) -> None:
    trial.assert_refused(sdk.error, openai.AuthenticationError)
    assert trial.ours.request_id == sdk.error.request_id


def check_login_page(sdk: SdkView, trial: Trial) -> None:
    # An HTML 200 is not an event stream: the SDK sees no event and no completion.
    assert trial.ours.result is not None
    trial.assert_login_page(not sdk.events and sdk.error is not None)


def check_provider_error(sdk: SdkView, trial: Trial) -> None:
    trial.assert_refused(sdk.error, openai.InternalServerError)
    assert trial.ours.request_id == sdk.error.request_id


CHECKS = {
    "answer": check_answer,
    "truncate": check_truncated,
    "midstream_error": check_midstream_error,
    "rate_limit": check_rate_limit,
    "auth_error": check_auth,
    "login_page": check_login_page,
    "server_error": check_provider_error,
}
