"""Gemini: the `google-genai` SDK against our adapter.

The SDK validates every chunk into its pydantic `GenerateContentResponse`; it has no strict
switch (unknown fields are kept). Grounding offsets are UTF-8 byte offsets in the SDK too: the
citation spans below convert them the way the API defines them, from the SDK's own fields.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import httpx
from google import genai
from google.genai import errors, types

from connectors.errors import parse_duration_seconds
from simulator import SimulatorHandle

from .harness import API_KEY, Cited, Scenario, Trial, each_scenario, sdk_verdict

MODEL = "gemini-2.5-flash"


def config(scenario: Scenario) -> types.GenerateContentConfig | None:
    """Our options, expressed in the SDK's own (validated) request types."""
    options: dict[str, Any] = {}
    if scenario.mode != "no_search":
        options["tools"] = [types.Tool(google_search=types.GoogleSearch())]
    if scenario.mode == "deep_thinking":
        options["thinking_config"] = types.ThinkingConfig(thinking_budget=8192)
    return types.GenerateContentConfig(**options) if options else None


@dataclass
class SdkView:
    chunks: list[types.GenerateContentResponse] = field(default_factory=list)
    error: Exception | None = None

    def text(self) -> str:
        return "".join(chunk.text or "" for chunk in self.chunks)

    def finish_reason(self) -> Any:
        reasons = [c.candidates[0].finish_reason for c in self.chunks if c.candidates]
        return next((r for r in reversed(reasons) if r), None)

    def citations(self) -> list[Cited]:
        text = self.text().encode()
        found: list[Cited] = []
        for chunk in self.chunks:
            grounding = chunk.candidates[0].grounding_metadata if chunk.candidates else None
            if grounding is None:
                continue
            sources = grounding.grounding_chunks or []
            for support in grounding.grounding_supports or []:
                segment = support.segment
                start = len(text[: segment.start_index or 0].decode())
                end = len(text[: segment.end_index or 0].decode())
                for index in support.grounding_chunk_indices or []:
                    web = sources[index].web
                    found.append(Cited(web.uri, web.title, start, end))
        return found

    def searches(self) -> tuple[list[str], list[str]]:
        """The grounding metadata's `web_search_queries`, and the URIs of the grounding
        chunks no support points at (found, not cited)."""
        queries: list[str] = []
        uncited: list[str] = []
        for chunk in self.chunks:
            grounding = chunk.candidates[0].grounding_metadata if chunk.candidates else None
            if grounding is None:
                continue
            queries += [q for q in grounding.web_search_queries or [] if q not in queries]
            used = {i for s in grounding.grounding_supports or []
                    for i in s.grounding_chunk_indices or []}  # fmt: skip
            for index, source in enumerate(grounding.grounding_chunks or []):
                if index not in used and source.web and source.web.uri not in uncited:
                    uncited.append(source.web.uri)
        return queries, uncited


def sdk_call(client: genai.Client, scenario: Scenario) -> SdkView:
    with sdk_verdict(SdkView()) as view:
        stream = client.models.generate_content_stream(
            model=MODEL, contents=scenario.question, config=config(scenario)
        )
        for chunk in stream:
            view.chunks.append(chunk)
    return view


def camel(value: Any) -> Any:
    """Proto JSON accepts snake_case and lowerCamelCase names alike; compare in one form."""
    if isinstance(value, dict):  # an empty message is the same as an absent one
        return {_camel(k): camel(v) for k, v in value.items() if v != {}}
    if isinstance(value, list):
        return [camel(v) for v in value]
    return value


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


@each_scenario
def test_gemini_sdk_and_adapter_agree(sim: SimulatorHandle, scenario: Scenario) -> None:
    trial = Trial(sim, scenario, "gemini", model=MODEL)
    client = genai.Client(
        api_key=API_KEY,
        http_options=types.HttpOptions(
            base_url=sim.url("gemini"),
            api_version="v1beta",
            httpx_client=trial.recorder.client(httpx),
        ),
    )
    sdk = sdk_call(client, scenario)
    ours = trial.replay(camel)
    fault = scenario.fault
    if fault is None:
        result = trial.assert_answered(sdk.error, sdk.text(), sdk.citations())
        assert sdk.finish_reason() == types.FinishReason.STOP
        assert sdk.chunks[-1].response_id == result.upstream_id == ours.request_id
        usage = sdk.chunks[-1].usage_metadata
        assert usage is not None and usage.total_token_count
        queries, uncited = sdk.searches()
        assert result.search_queries == queries
        assert [c.url for c in result.found] == uncited
        assert bool(queries) == bool(uncited) == (scenario.mode != "no_search")
    elif fault == "truncate":
        trial.assert_quietly_truncated(sdk.error, sdk.finish_reason(), sdk.text())
    elif fault == "midstream_error":
        message = getattr(sdk.error, "message", None)
        trial.assert_failed_midstream(sdk.error, errors.APIError, message=message)
    elif fault == "rate_limit":
        assert isinstance(sdk.error, errors.ClientError) and sdk.error.code == 429, sdk.error
        details = sdk.error.details["error"]["details"]
        delay = next(d["retryDelay"] for d in details if d["@type"].endswith("RetryInfo"))
        trial.assert_rate_limited(parse_duration_seconds(delay))
    elif fault == "auth_error":
        trial.assert_refused(sdk.error, errors.ClientError)
    elif fault == "login_page":
        trial.assert_login_page(sdk.error is not None or not sdk.chunks)
    elif fault == "server_error":
        trial.assert_refused(sdk.error, errors.ServerError)
        assert json.loads(trial.exchanges[0].body)["error"]["code"] == sdk.error.code
