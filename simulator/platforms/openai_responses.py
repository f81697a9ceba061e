"""OpenAI Responses API (`POST /v1/responses`), streaming and not (docs/platforms.md §1).

Streams are `event: <type>` + `data: <json>` frames with increasing `sequence_number`, ending
in `response.completed` (no `[DONE]`). Citations are `url_citation` annotations with code point
offsets into the part text. With a web_search tool one `web_search_call` precedes the message:
`action.query` and `action.queries` (content.searches_for) and, when the request includes
`web_search_call.action.sources`, the URLs found: the cited ones and one no annotation cites
(content.UNCITED_SOURCE). Faults: 429 with `retry-after-ms` and `retry-after`, 500/503,
401, hang, login/error pages with 200, truncated streams, `event: error` / `response.failed`.
"""

from __future__ import annotations

import math
from typing import Any

from ..content import UNCITED_SOURCE, SimAnswer, searches_for
from ..faults import HTTP_FAULTS, STREAM_FAULTS, Draw
from ..protocol import PlatformProtocol, SimRequest, SimResponse, unknown_fields
from . import responses_wire as wire
from .responses_wire import Event

DELTA_CHARS = 12


# POST /v1/responses body fields (openai-python ResponseCreateParams).
RESPONSES_FIELDS = frozenset(
    {"access_programs", "background", "background_options", "context_management", "conversation",
     "image", "include", "input", "instructions", "max_output_tokens", "max_tool_calls",
     "metadata", "model", "moderation", "parallel_tool_calls", "previous_response_id", "prompt",
     "prompt_cache_key", "prompt_cache_options", "prompt_cache_retention", "reasoning",
     "safety_identifier", "service_tier", "store", "stream", "stream_options", "temperature",
     "text", "tool_choice", "tools", "top_logprobs", "top_p", "truncation", "user"}
)  # fmt: skip


def _error(message: str, kind: str, code: str | None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def unknown_parameter(body: dict[str, Any], known: frozenset[str]) -> SimResponse | None:
    """OpenAI's 400 for a body field it does not know."""
    unknown = unknown_fields(body, known)
    if not unknown:
        return None
    message = f"Unknown parameter: '{unknown[0]}'."
    return SimResponse.json(
        400, _error(message, "invalid_request_error", "unknown_parameter", unknown[0])
    )


def _echoed_request(body: dict[str, Any]) -> dict[str, Any]:
    """What every Response object echoes of its request; the SDK's model requires
    `tools`, `tool_choice` and `parallel_tool_calls` (tests/fidelity)."""
    return {
        "tools": body.get("tools") or [],
        "tool_choice": body.get("tool_choice", "auto"),
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "reasoning": body.get("reasoning"),
        "metadata": body.get("metadata") or {},
    }


# What a `midstream_error` fault says.
STREAM_FAILURE = ("server_error", "The model failed to generate a response.")


def url_annotations(answer: SimAnswer) -> list[dict[str, Any]]:
    return [
        {
            "type": "url_citation",
            "url": c.url,
            "title": c.title,
            "start_index": c.start,
            "end_index": c.end,
        }
        for c in answer.citations
    ]


class OpenAIResponsesProtocol(PlatformProtocol):
    name = "openai"
    faults = HTTP_FAULTS | STREAM_FAULTS

    def _headers(self, draw: Draw) -> dict[str, str]:
        return {
            "x-request-id": f"req_{draw.rng.getrandbits(96):024x}",
            "openai-processing-ms": str(int(draw.latency_seconds * 1000) + 1),
            "openai-version": "2020-10-01",
            "x-ratelimit-limit-requests": "500",
            "x-ratelimit-remaining-requests": "499",
            "x-ratelimit-reset-requests": "120ms",
        }

    def rate_limited(self, draw: Draw) -> SimResponse:
        seconds = float(draw.params.get("retry_after_seconds", draw.profile["retry_after_seconds"]))
        message = f"Rate limit reached for requests. Please try again in {seconds:g}s."
        return SimResponse.json(
            429,
            _error(message, "requests", "rate_limit_exceeded"),
            {"retry-after-ms": str(int(seconds * 1000)), "retry-after": str(math.ceil(seconds))},
        )

    def server_error(self, draw: Draw, *, overloaded: bool = False) -> SimResponse:
        status = int(draw.params.get("status", 503 if overloaded else 500))
        message = (
            "The engine is currently overloaded, please try again later"
            if overloaded
            else "The server had an error while processing your request. Sorry about that!"
        )
        return SimResponse.json(status, _error(message, "server_error", None))

    def auth_error(self, draw: Draw) -> SimResponse:
        message = "Incorrect API key provided."
        return SimResponse.json(401, _error(message, "invalid_request_error", "invalid_api_key"))

    def handle(self, request: SimRequest) -> SimResponse:
        if request.method != "POST" or request.path != "/v1/responses":
            return SimResponse.json(404, _error("Not found", "invalid_request_error", None))
        key = request.bearer()
        body = request.json()
        if not isinstance(body, dict) or not body.get("model") or "input" not in body:
            message = "Missing required parameter: 'model' or 'input'."
            return SimResponse.json(400, _error(message, "invalid_request_error", None))
        if (refused := unknown_parameter(body, RESPONSES_FIELDS)) is not None:
            return refused
        question = wire.question_of(body["input"])
        draw = self.sim.draw(self.name, question, self.faults)
        headers = self._headers(draw)
        if (refused := self.refused(key, headers, draw)) is not None:
            return refused
        web_search = any(
            isinstance(t, dict) and str(t.get("type", "")).startswith("web_search")
            for t in body.get("tools") or []
        )
        answer = self.sim.answer_for(question, draw)
        if not web_search:
            answer.citations = []
        sources = "web_search_call.action.sources" in (body.get("include") or [])
        response = self._response(draw, str(body["model"]), question, answer, web_search, sources)
        response |= _echoed_request(body)
        self.record(question, draw, answer, response["id"], headers["x-request-id"])
        if body.get("stream"):
            chunks = wire.answer_stream(draw, response, answer, self._item_events, STREAM_FAILURE)
            return self._respond(
                SimResponse(200, dict(wire.SSE_HEADERS), chunks=chunks), headers, draw
            )
        if draw.fault == "midstream_error":
            response |= {"status": "failed", "output": [], "error": {"code": "server_error",
                         "message": "The model failed to generate a response."}}  # fmt: skip
        return self._respond(SimResponse.json(200, response), headers, draw)

    def _response(
        self,
        draw: Draw,
        model: str,
        question: str,
        answer: SimAnswer,
        web_search: bool,
        sources: bool,
    ) -> dict[str, Any]:
        output: list[dict[str, Any]] = []
        if web_search:
            queries = searches_for(question)
            found = [*dict.fromkeys(c.url for c in answer.citations), UNCITED_SOURCE[0]]
            call = wire.web_search_call(
                draw, queries[0] if queries else "", queries=queries,
                sources=found if sources else None,
            )  # fmt: skip
            output.append(call)
        part = {"type": "output_text", "text": answer.text, "annotations": url_annotations(answer),
                "logprobs": []}  # fmt: skip
        output.append(wire.message(draw, part))
        tokens = len(answer.text) // 4 + 1
        usage = {
            "input_tokens": 20,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 20 + tokens,
        }
        return wire.response(f"resp_{draw.rng.getrandbits(96):024x}", model, output, usage)

    def _item_events(self, index: int, item: dict[str, Any], answer: SimAnswer) -> list[Event]:
        if item["type"] == "web_search_call":
            return wire.web_search_events(index, item)
        at = wire.part_at(index, item)
        text = answer.text
        events: list[Event] = []
        for start in range(0, len(text), DELTA_CHARS):
            delta = text[start : start + DELTA_CHARS]
            events.append(("response.output_text.delta", at | {"delta": delta, "logprobs": []}))
        # The annotations, with offsets into the text, follow all of it.
        for number, annotation in enumerate(item["content"][0]["annotations"]):
            events.append(
                ("response.output_text.annotation.added",
                 at | {"annotation_index": number, "annotation": annotation})
            )  # fmt: skip
        return wire.message_events(index, item, events, logprobs=[])
