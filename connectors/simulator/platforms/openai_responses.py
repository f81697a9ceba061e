"""OpenAI Responses API (`POST /v1/responses`), streaming and not (platform_protocols.md §1).

Streams are `event: <type>` + `data: <json>` frames with increasing `sequence_number`, ending
in `response.completed` (no `[DONE]`). Citations are `url_citation` annotations with code point
offsets into the part text. Faults: 429 with `retry-after-ms` and `retry-after`, 500/503,
401, hang, login/error pages with 200, truncated streams, `event: error` / `response.failed`.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from ..content import SimAnswer
from ..faults import HTTP_FAULTS, STREAM_FAULTS, Draw
from ..protocol import PlatformProtocol, SimRequest, SimResponse, paced, unknown_fields

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
Event = tuple[str, dict[str, Any]]


def _question(value: Any) -> str:
    """`input` is a string or a list of message items; the question is their text."""
    if isinstance(value, str):
        return value
    texts: list[str] = []
    for item in value if isinstance(value, list) else []:
        content = item.get("content") if isinstance(item, dict) else None
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [str(c.get("text", "")) for c in content if isinstance(c, dict)]
    return "\n".join(texts)


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


def _annotations(answer: SimAnswer) -> list[dict[str, Any]]:
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
        question = _question(body["input"])
        draw = self.sim.draw(self.name, question, self.faults)
        headers = self._headers(draw)
        if not key or key.startswith("invalid"):
            return self._respond(self.auth_error(draw), headers, draw)
        if (failure := self.http_fault(draw)) is not None:
            return self._respond(failure, headers, draw)
        web_search = any(
            isinstance(t, dict) and str(t.get("type", "")).startswith("web_search")
            for t in body.get("tools") or []
        )
        answer = self.sim.answer_for(question, draw)
        if not web_search:
            answer.citations = []
        response = self._response(draw, str(body["model"]), answer, web_search)
        response |= _echoed_request(body)
        self.sim.record_answer(
            self.name,
            question,
            draw,
            answer,
            upstream_id=response["id"],
            request_id=headers["x-request-id"],
        )
        if body.get("stream"):
            chunks = self._stream(draw, response, answer)
            return self._respond(
                SimResponse(
                    200, {"Content-Type": "text/event-stream; charset=utf-8"}, chunks=chunks
                ),
                headers,
                draw,
            )
        if draw.fault == "midstream_error":
            response |= {"status": "failed", "output": [], "error": {"code": "server_error",
                         "message": "The model failed to generate a response."}}  # fmt: skip
        return self._respond(SimResponse.json(200, response), headers, draw)

    def _response(
        self, draw: Draw, model: str, answer: SimAnswer, web_search: bool
    ) -> dict[str, Any]:
        output: list[dict[str, Any]] = []
        if web_search:
            output.append(
                {
                    "type": "web_search_call",
                    "id": f"ws_{draw.rng.getrandbits(64):016x}",
                    "status": "completed",
                    "action": {"type": "search", "query": answer.text[:40]},
                }
            )
        output.append(
            {
                "type": "message",
                "id": f"msg_{draw.rng.getrandbits(64):016x}",
                "role": "assistant",
                "status": "completed",
                "content": [
                    {
                        "type": "output_text",
                        "text": answer.text,
                        "annotations": _annotations(answer),
                        "logprobs": [],
                    }
                ],
            }
        )
        tokens = len(answer.text) // 4 + 1
        return {
            "id": f"resp_{draw.rng.getrandbits(96):024x}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": model,
            "output": output,
            "usage": {
                "input_tokens": 20,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 20 + tokens,
            },
            "error": None,
            "incomplete_details": None,
        }

    def _events(self, response: dict[str, Any], answer: SimAnswer) -> list[Event]:
        pending = response | {"status": "in_progress", "output": [], "usage": None}
        events: list[Event] = [
            ("response.created", {"response": pending}),
            ("response.in_progress", {"response": pending}),
        ]
        for index, item in enumerate(response["output"]):
            events += self._item_events(index, item, answer)
        events.append(("response.completed", {"response": response}))
        return events

    def _item_events(self, index: int, item: dict[str, Any], answer: SimAnswer) -> list[Event]:
        where = {"output_index": index, "item_id": item["id"]}
        if item["type"] == "web_search_call":
            started = item | {"status": "in_progress"}
            return [
                ("response.output_item.added", {"output_index": index, "item": started}),
                ("response.web_search_call.in_progress", where),
                ("response.web_search_call.searching", where),
                ("response.web_search_call.completed", where),
                ("response.output_item.done", {"output_index": index, "item": item}),
            ]
        part = item["content"][0]
        at = where | {"content_index": 0}
        empty = {"type": "output_text", "text": "", "annotations": []}
        events: list[Event] = [
            ("response.output_item.added", {"output_index": index,
             "item": item | {"status": "in_progress", "content": []}}),
            ("response.content_part.added", at | {"part": empty}),
        ]  # fmt: skip
        text = answer.text
        for start in range(0, len(text), DELTA_CHARS):
            delta = text[start : start + DELTA_CHARS]
            events.append(("response.output_text.delta", at | {"delta": delta, "logprobs": []}))
        for number, annotation in enumerate(part["annotations"]):
            events.append(
                ("response.output_text.annotation.added",
                 at | {"annotation_index": number, "annotation": annotation})
            )  # fmt: skip
        events += [
            ("response.output_text.done", at | {"text": text, "logprobs": []}),
            ("response.content_part.done", at | {"part": part}),
            ("response.output_item.done", {"output_index": index, "item": item}),
        ]
        return events

    def _stream(
        self, draw: Draw, response: dict[str, Any], answer: SimAnswer
    ) -> list[bytes | float]:
        events = self._events(response, answer)
        first_delta = next(
            i for i, (kind, _) in enumerate(events) if kind.startswith("response.content_part")
        )
        stall = 0.0
        if draw.fault == "truncate":
            events = events[: draw.rng.randint(first_delta + 1, len(events) - 1)]
            # With `stall_seconds` the connection stays open and silent after the cut, so the
            # client's read timeout fires mid-body instead of seeing a clean end.
            stall = float(draw.params.get("stall_seconds", 0.0))
        elif draw.fault == "midstream_error":
            events = events[: draw.rng.randint(first_delta + 1, len(events) - 2)]
            events.append(self._failure_event(draw, response))
        frames = []
        for sequence, (kind, payload) in enumerate(events):
            data = {"type": kind, "sequence_number": sequence} | payload
            frames.append(f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n")
        return paced(draw, frames, stall)

    def _failure_event(self, draw: Draw, response: dict[str, Any]) -> Event:
        code = str(draw.params.get("code", "server_error"))
        message = "The model failed to generate a response."
        variant = draw.params.get("variant") or draw.rng.choice(["error", "response.failed"])
        if variant == "error":
            return ("error", {"code": code, "message": message, "param": None})
        failed = response | {"status": "failed", "error": {"code": code, "message": message}}
        return ("response.failed", {"response": failed})
