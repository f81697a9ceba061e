"""Volcengine Ark / Doubao (docs/platforms.md §8).

* `POST /api/v3/responses`: OpenAI-shaped Responses API. With `tools: [{"type": "web_search"}]`
  a `web_search_call` item precedes the message; `thinking: {"type": "enabled"}` adds a
  `reasoning` item. Annotations are `{"type": "url_citation", "title", "url", "logo_url",
  "mobile_url", "site_name", "publish_time", "summary"}` with **no offsets**; streamed they come
  as `response.output_text.annotation.added` (no start/end). Stream ends `response.completed`.
* `POST /api/v3/bots/chat/completions`: `model` is a bot id (`bot-…`); chat-completion chunks,
  top-level `references[]` on the first content chunk, usage chunk, then `data: [DONE]`.

Errors `{"error": {"code", "message": "… Request id: …", "param", "type"}}`: 400
MissingParameter/InvalidParameter, 401 AuthenticationError, 403 AccountOverdueError, 404
InvalidEndpointOrModel.NotFound, 429 RateLimitExceeded.EndpointRPMExceeded (no Retry-After),
500 InternalServiceError. Mid-stream: `event: error` / `response.failed` (Responses) or
`data: {"error": {...}}` (Bots). Header `X-Request-Id` on every response.
"""

from __future__ import annotations

import json
import time
from typing import Any

from ..content import SimAnswer
from ..faults import HTTP_FAULTS, STREAM_FAULTS, Draw
from ..protocol import PlatformProtocol, SimRequest, SimResponse, paced
from . import responses_wire as wire
from .responses_wire import SSE_HEADERS, Event

RESPONSES_PATH = "/api/v3/responses"
BOTS_PATH = "/api/v3/bots/chat/completions"
DELTA_CHARS = 8
# What a `midstream_error` fault says.
STREAM_FAILURE = ("InternalServiceError", "The service encountered an unexpected internal error.")
THINKING_TYPES = frozenset({"enabled", "disabled", "auto"})


def _request_id(draw: Draw) -> str:
    return f"20261111020000{draw.rng.getrandbits(80):020X}"


def _error(code: str, message: str, kind: str, request_id: str, param: str = "") -> dict[str, Any]:
    return {
        "error": {
            "code": code,
            "message": f"{message} Request id: {request_id}",
            "param": param,
            "type": kind,
        }
    }


def _sources(answer: SimAnswer) -> list[dict[str, Any]]:
    """Ark's annotation / reference fields for each cited URL (no offsets anywhere)."""
    found: list[dict[str, Any]] = []
    for citation in answer.citations:
        domain = citation.url.split("/")[2]
        found.append(
            {
                "title": citation.title,
                "url": citation.url,
                "logo_url": f"https://{domain}/favicon.ico",
                "mobile_url": citation.url,
                "site_name": domain,
                "publish_time": "2026年11月01日 08:00:00(CST)",
                "summary": citation.cited_text,
            }
        )
    return found


class DoubaoProtocol(PlatformProtocol):
    name = "doubao"
    faults = HTTP_FAULTS | STREAM_FAULTS

    # --- error shapes -----------------------------------------------------------------------
    def rate_limited(self, draw: Draw) -> SimResponse:
        message = (
            "The request has exceeded the rate limit of the endpoint (RPM). Please retry later."
        )
        return SimResponse.json(
            429,
            _error(
                "RateLimitExceeded.EndpointRPMExceeded",
                message,
                "TooManyRequests",
                _request_id(draw),
            ),
        )

    def server_error(self, draw: Draw, *, overloaded: bool = False) -> SimResponse:
        status = int(draw.params.get("status", 503 if overloaded else 500))
        if status == 503:
            body = _error(
                "ServiceUnavailable",
                "The service is temporarily unavailable.",
                "ServiceUnavailable",
                _request_id(draw),
            )
        else:
            body = _error(
                "InternalServiceError",
                "The service encountered an unexpected internal error.",
                "InternalServiceError",
                _request_id(draw),
            )
        return SimResponse.json(status, body)

    def auth_error(self, draw: Draw) -> SimResponse:
        if int(draw.params.get("status", 401)) == 403:
            message = "Your account has an overdue balance. Please recharge."
            return SimResponse.json(
                403, _error("AccountOverdueError", message, "Forbidden", _request_id(draw))
            )
        message = "The API key or AK/SK in the request is missing or invalid."
        return SimResponse.json(
            401, _error("AuthenticationError", message, "Unauthorized", _request_id(draw))
        )

    # --- routing ------------------------------------------------------------------------------
    def handle(self, request: SimRequest) -> SimResponse:
        if request.method != "POST" or request.path not in (RESPONSES_PATH, BOTS_PATH):
            body = _error(
                "InvalidEndpoint.NotFound",
                "The endpoint does not exist.",
                "NotFound",
                "sim-not-found",
            )
            return SimResponse.json(404, body)
        key = request.bearer()
        if not key:
            message = "The API key or AK/SK in the request is missing or invalid."
            return SimResponse.json(
                401, _error("AuthenticationError", message, "Unauthorized", "sim-no-key")
            )
        body = request.json()
        bots = request.path == BOTS_PATH
        problem = self._validate(body, bots)
        if problem is not None:
            return problem
        assert isinstance(body, dict)
        question = wire.question_of(body["messages"] if bots else body["input"])
        draw = self.sim.draw(self.name, question, self.faults)
        request_id = _request_id(draw)
        headers = {"X-Request-Id": request_id}
        if (refused := self.refused(key, headers, draw)) is not None:
            return refused
        if bots:
            return self._bots(body, question, draw, headers)
        return self._responses(body, question, draw, headers)

    def _validate(self, body: Any, bots: bool) -> SimResponse | None:
        def bad(code: str, message: str, param: str, status: int = 400) -> SimResponse:
            kind = "BadRequest" if status == 400 else "NotFound"
            return SimResponse.json(status, _error(code, message, kind, "sim-bad-request", param))

        if not isinstance(body, dict) or not body.get("model"):
            return bad(
                "MissingParameter",
                "The request failed because it is missing one or "
                "multiple required parameters: model.",
                "model",
            )
        if bots:
            if not str(body["model"]).startswith("bot-"):
                return bad(
                    "InvalidEndpointOrModel.NotFound",
                    "The bot does not exist or you do not have access to it.",
                    "model",
                    404,
                )
            if not isinstance(body.get("messages"), list) or not body["messages"]:
                return bad(
                    "MissingParameter",
                    "The request failed because it is missing one "
                    "or multiple required parameters: messages.",
                    "messages",
                )
            return None
        if "input" not in body:
            return bad(
                "MissingParameter",
                "The request failed because it is missing one or "
                "multiple required parameters: input.",
                "input",
            )
        thinking = body.get("thinking")
        if thinking is not None and (
            not isinstance(thinking, dict) or thinking.get("type") not in THINKING_TYPES
        ):
            return bad(
                "InvalidParameter",
                "A parameter specified in the request is not valid: thinking.type.",
                "thinking.type",
            )
        return None

    # --- Responses API --------------------------------------------------------------------------
    def _responses(
        self, body: dict[str, Any], question: str, draw: Draw, headers: dict[str, str]
    ) -> SimResponse:
        web_search = any(
            isinstance(t, dict) and t.get("type") == "web_search" for t in body.get("tools") or []
        )
        thinking = (body.get("thinking") or {}).get("type") == "enabled"
        answer = self.sim.answer_for(question, draw)
        if not web_search:
            answer.citations = []
        response = self._response(draw, str(body["model"]), answer, web_search, thinking)
        self.record(question, draw, answer, response["id"], headers["X-Request-Id"])
        if body.get("stream"):
            chunks = wire.answer_stream(draw, response, answer, self._item_events, STREAM_FAILURE)
            return self._respond(SimResponse(200, dict(SSE_HEADERS), chunks=chunks), headers, draw)
        if draw.fault == "midstream_error":
            error = {"code": "InternalServiceError", "message": "The model failed to respond."}
            response |= {"status": "failed", "output": [], "error": error}
        return self._respond(SimResponse.json(200, response), headers, draw)

    def _response(
        self, draw: Draw, model: str, answer: SimAnswer, web_search: bool, thinking: bool
    ) -> dict[str, Any]:
        output: list[dict[str, Any]] = []
        if thinking:
            output.append(
                {
                    "type": "reasoning",
                    "id": f"rs_{draw.rng.getrandbits(64):016x}",
                    "status": "completed",
                    "summary": [{"type": "summary_text", "text": "先检索，再比较几家供应商。"}],
                }
            )
        if web_search:
            output.append(wire.web_search_call(draw, answer.text[:30]))
        annotations = [{"type": "url_citation"} | source for source in _sources(answer)]
        part = {"type": "output_text", "text": answer.text, "annotations": annotations}
        output.append(wire.message(draw, part))
        tokens = len(answer.text) // 2 + 1
        usage = {"input_tokens": 40, "output_tokens": tokens, "total_tokens": 40 + tokens}
        return wire.response(f"resp_0217{draw.rng.getrandbits(96):024x}", model, output, usage)

    def _item_events(self, index: int, item: dict[str, Any], answer: SimAnswer) -> list[Event]:
        where = {"output_index": index, "item_id": item["id"]}
        if item["type"] == "reasoning":
            summary = where | {"summary_index": 0}
            text = item["summary"][0]["text"]
            return [
                wire.item_added(index, item),
                ("response.reasoning_summary_text.delta", summary | {"delta": text}),
                ("response.reasoning_summary_text.done", summary | {"text": text}),
                wire.item_done(index, item),
            ]
        if item["type"] == "web_search_call":
            return wire.web_search_events(index, item)
        at = wire.part_at(index, item)
        text = answer.text
        annotations = item["content"][0]["annotations"]
        # Ark emits an annotation once the text it supports has streamed (with no offsets).
        pending = [(c.end, a) for c, a in zip(answer.citations, annotations, strict=True)]
        events: list[Event] = []
        for start in range(0, len(text), DELTA_CHARS):
            sent = start + DELTA_CHARS
            events.append(("response.output_text.delta", at | {"delta": text[start:sent]}))
            while pending and pending[0][0] <= sent:
                annotation = pending.pop(0)[1]
                events.append(
                    ("response.output_text.annotation.added", at | {"annotation": annotation})
                )
        for _, annotation in pending:
            events.append(
                ("response.output_text.annotation.added", at | {"annotation": annotation})
            )
        return wire.message_events(index, item, events)

    # --- Bots API -------------------------------------------------------------------------------
    def _bots(
        self, body: dict[str, Any], question: str, draw: Draw, headers: dict[str, str]
    ) -> SimResponse:
        answer = self.sim.answer_for(question, draw)  # the bot's web plugin always searches
        chunk_id = f"0217{draw.rng.getrandbits(96):024x}"
        self.record(question, draw, answer, chunk_id, headers["X-Request-Id"], bot=body["model"])
        references = _sources(answer)
        base = {"id": chunk_id, "created": int(time.time()), "model": str(body["model"])}
        tokens = len(answer.text) // 2 + 1
        usage = {"prompt_tokens": 40, "completion_tokens": tokens, "total_tokens": 40 + tokens}
        if not body.get("stream"):
            if draw.fault == "midstream_error":
                failure = _error(
                    "InternalServiceError",
                    "The service encountered an unexpected internal error.",
                    "InternalServiceError",
                    headers["X-Request-Id"],
                )
                return self._respond(SimResponse.json(500, failure), headers, draw)
            message = {"role": "assistant", "content": answer.text}
            payload = base | {
                "object": "chat.completion",
                "usage": usage,
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "references": references,
                "metadata": {},
            }
            return self._respond(SimResponse.json(200, payload), headers, draw)
        chunk = base | {"object": "chat.completion.chunk"}
        datas: list[dict[str, Any]] = [
            chunk
            | {
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": ""},
                        "finish_reason": None,
                    }
                ],
                "references": references,
            }
        ]
        for start in range(0, len(answer.text), DELTA_CHARS):
            piece = answer.text[start : start + DELTA_CHARS]
            datas.append(
                chunk
                | {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
            )
        datas.append(chunk | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if include_usage:
            bot_usage = {
                "model_usage": [{"name": str(body.get("model")), **usage}],
                "action_usage": [{"name": "content_plugin", "count": 1}],
            }
            datas.append(chunk | {"choices": [], "usage": usage, "bot_usage": bot_usage})
        frames = [f"data: {json.dumps(d, ensure_ascii=False)}\n\n" for d in datas]
        frames.append("data: [DONE]\n\n")
        stall = 0.0
        if draw.fault == "truncate":
            frames = frames[: draw.rng.randint(2, len(frames) - 1)]
            stall = float(draw.params.get("stall_seconds", 0.0))
        elif draw.fault == "midstream_error":
            frames = frames[: draw.rng.randint(2, len(frames) - 2)]
            failure = _error(
                "InternalServiceError",
                "The service encountered an unexpected internal error.",
                "InternalServiceError",
                headers["X-Request-Id"],
            )
            frames.append(f"data: {json.dumps(failure, ensure_ascii=False)}\n\n")
        chunks = paced(draw, frames, stall)
        return self._respond(SimResponse(200, dict(SSE_HEADERS), chunks=chunks), headers, draw)
