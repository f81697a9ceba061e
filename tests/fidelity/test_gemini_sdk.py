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
import pytest
from google import genai
from google.genai import errors, types

from connectors.base import ErrorClass
from connectors.errors import parse_duration_seconds
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


def sdk_call(client: genai.Client, scenario: Scenario) -> SdkView:
    view = SdkView()
    try:
        stream = client.models.generate_content_stream(
            model=MODEL, contents=scenario.question, config=config(scenario)
        )
        for chunk in stream:
            view.chunks.append(chunk)
    except Exception as error:  # the SDK's own verdict is what we compare
        view.error = error
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


@pytest.mark.parametrize("scenario", SCENARIOS, ids=SCENARIO_IDS)
def test_gemini_sdk_and_adapter_agree(sim: SimulatorHandle, scenario: Scenario) -> None:
    prepare(sim, scenario, "gemini")
    recorder = Recorder()
    client = genai.Client(
        api_key=API_KEY,
        http_options=types.HttpOptions(
            base_url=sim.url("gemini"), api_version="v1beta", httpx_client=recorder.client(httpx)
        ),
    )
    sdk = sdk_call(client, scenario)
    assert len(recorder.exchanges) == 1
    ours = replay("gemini", sim, scenario, recorder.exchanges, model=MODEL)
    assert camel(ours.sent_json()) == camel(recorder.exchanges[0].request_json())
    fault = scenario.fault
    if fault is None:
        assert sdk.error is None, f"the SDK rejected the simulator's answer: {sdk.error!r}"
        result = assert_answered(ours)
        assert sdk.text() == result.answer_text
        assert sdk.citations() == our_citations(result)
        assert sdk.finish_reason() == types.FinishReason.STOP
        assert sdk.chunks[-1].response_id == result.upstream_id == ours.request_id
        usage = sdk.chunks[-1].usage_metadata
        assert usage is not None and usage.total_token_count
        if scenario.mode != "no_search":
            assert result.citations, "a search answer with no citations proves nothing"
    elif fault == "truncate":
        assert sdk.error is None and sdk.finish_reason() is None
        assert_truncated(ours, sdk.text())
    elif fault == "midstream_error":
        assert isinstance(sdk.error, errors.APIError), sdk.error
        assert ours.result is not None and ours.result.collection_state == "failed"
        assert ours.result.error is not None
        assert ours.result.error["message"] == sdk.error.message
        assert ours.error_class is ErrorClass.TRANSIENT
    elif fault == "rate_limit":
        assert isinstance(sdk.error, errors.ClientError) and sdk.error.code == 429, sdk.error
        details = sdk.error.details["error"]["details"]
        delay = next(d["retryDelay"] for d in details if d["@type"].endswith("RetryInfo"))
        assert ours.error_class is ErrorClass.RATE_LIMITED
        assert ours.error is not None and ours.error.retry_after == parse_duration_seconds(delay)
    elif fault == "auth_error":
        assert_refusal(fault, sdk.error, errors.ClientError, ours)
    elif fault == "login_page":
        assert sdk.error is not None or not sdk.chunks
        assert ours.error_class is ErrorClass.PARSE_FAILED
    elif fault == "server_error":
        assert_refusal(fault, sdk.error, errors.ServerError, ours)
        assert json.loads(recorder.exchanges[0].body)["error"]["code"] == sdk.error.code
