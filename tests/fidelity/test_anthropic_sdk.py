"""Anthropic Messages: the `anthropic` SDK (strict) against our adapter."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2

from simulator import SimulatorHandle

from .harness import Cited, EventsView, Scenario, Trial, chat_request, each_scenario, sdk_verdict

MODEL = "claude-sonnet-4-6"


def request_kwargs(scenario: Scenario) -> dict[str, Any]:
    """Our options, expressed in the SDK's own request parameters."""
    kwargs: dict[str, Any] = chat_request(MODEL, scenario) | {"max_tokens": 4096}
    if scenario.mode != "no_search":
        kwargs["tools"] = [
            {
                "type": "web_search_20250305",
                "name": "web_search",
                "max_uses": 5,
                "user_location": {"type": "approximate", "country": scenario.region.upper()},
            }
        ]
    if scenario.mode == "deep_thinking":
        kwargs["thinking"] = {"type": "enabled", "budget_tokens": 8192}
        kwargs["max_tokens"] = 8192 + 4096
    return kwargs


class SdkView(EventsView):
    def text_and_citations(self) -> tuple[str, list[Cited]]:
        """Anthropic gives no offsets: a citation spans the text block that carries it."""
        text, cited = "", []
        for block in self.final.content:
            if block.type != "text":
                continue
            for citation in block.citations or []:
                cited.append(
                    Cited(citation.url, citation.title, len(text), len(text) + len(block.text))
                )
            text += block.text
        return text, cited

    def searches(self) -> tuple[list[str], list[str]]:
        """The `server_tool_use` web_search queries, and the URLs of search results no text
        block cites (found, not cited)."""
        content = self.final.content
        queries = [b.input["query"] for b in content
                   if b.type == "server_tool_use" and b.name == "web_search"]  # fmt: skip
        cited = {c.url for b in content if b.type == "text" for c in b.citations or []}
        results = [r.url for b in content if b.type == "web_search_tool_result"
                   for r in (b.content if isinstance(b.content, list) else [])]  # fmt: skip
        return queries, [url for url in dict.fromkeys(results) if url not in cited]

    def streamed_text(self) -> str:
        return "".join(e.delta.text for e in self.events if e.type == "content_block_delta"
                       and e.delta.type == "text_delta")  # fmt: skip


def sdk_call(client: anthropic.Anthropic, scenario: Scenario) -> SdkView:
    stream_manager = client.messages.stream(**request_kwargs(scenario))
    with sdk_verdict(SdkView()) as view, stream_manager as stream:
        view.request_id = stream.request_id
        for event in stream:
            view.events.append(event)
        view.final = stream.get_final_message()
    return view


@each_scenario
def test_anthropic_sdk_and_adapter_agree(sim: SimulatorHandle, scenario: Scenario) -> None:
    trial = Trial(sim, scenario, "anthropic", model=MODEL)
    client = anthropic.Anthropic(**trial.client_options(httpx2))
    sdk = sdk_call(client, scenario)
    ours = trial.replay()
    fault = scenario.fault
    if fault is None:
        result = trial.assert_answered(sdk.error, *sdk.text_and_citations())
        assert sdk.final.stop_reason == "end_turn"
        assert sdk.final.id == result.upstream_id
        assert sdk.final.usage.output_tokens > 0
        assert sdk.request_id == ours.request_id
        queries, uncited = sdk.searches()
        assert result.search_queries == queries
        assert [c.url for c in result.found] == uncited
        assert bool(queries) == bool(uncited) == (scenario.mode != "no_search")
    elif fault == "truncate":
        assert sdk.error is None or not isinstance(sdk.error, anthropic.APIStatusError)
        assert not any(e.type == "message_stop" for e in sdk.events)
        trial.assert_truncated(sdk.streamed_text())
    elif fault == "midstream_error":
        sdk_class = anthropic.APIStatusError | anthropic.APIError
        code = getattr(sdk.error, "body", None) and sdk.error.body["error"]["type"]
        trial.assert_failed_midstream(sdk.error, sdk_class, code=code)
    elif fault == "rate_limit":
        assert isinstance(sdk.error, anthropic.RateLimitError), sdk.error
        trial.assert_rate_limited(client._parse_retry_after_header(sdk.error.response.headers))
        assert ours.request_id == sdk.error.request_id
    elif fault == "auth_error":
        trial.assert_refused(sdk.error, anthropic.AuthenticationError)
        assert ours.request_id == sdk.error.request_id
    elif fault == "login_page":
        trial.assert_login_page(sdk.error is not None or not sdk.events)
    elif fault == "server_error":
        trial.assert_refused(sdk.error, anthropic.InternalServerError)
        assert ours.request_id == sdk.error.request_id
