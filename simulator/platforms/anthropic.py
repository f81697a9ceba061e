"""Anthropic Messages API (`POST /v1/messages`), streaming and not (docs/platforms.md §3).

Requests need `x-api-key` (or an OAuth `Authorization: Bearer`) and `anthropic-version`;
`model`, `max_tokens` and `messages` are required. Answers with the `web_search_20250305` tool
are a preamble text block, a `server_tool_use` block (its `input.query` the first of
content.searches_for), a `web_search_tool_result` block (the cited results and one no text
block cites) and then text blocks, where each cited sentence is its own block carrying
`web_search_result_location` citations (no offsets). Streams are `event: <type>` +
`data: <json>` frames ending in `message_stop`, with `ping` keep-alives; in a stream,
citations arrive as `citations_delta` before the block's `text_delta`s. Every response has a
`request-id` header; error bodies are
`{"type": "error", "error": {"type", "message"}, "request_id"}`. Faults: 429 `rate_limit_error`
with `retry-after` (integer seconds) and `anthropic-ratelimit-*` headers, 500 `api_error`,
529 `overloaded_error`, 401/403, hang, login/error pages with 200, truncated streams and
`event: error` mid-stream.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from ..content import UNCITED_SOURCE, SimAnswer, SimCitation, is_cjk, searches_for
from ..faults import HTTP_FAULTS, STREAM_FAULTS, Draw
from ..protocol import (
    PlatformProtocol,
    SimRequest,
    SimResponse,
    cut_stream,
    paced,
    unknown_fields,
    user_text,
)

DELTA_CHARS = 10
JSON_DELTA_CHARS = 16
MIN_THINKING_BUDGET = 1024
# POST /v1/messages body fields (anthropic-sdk-python MessageCreateParams).
MESSAGES_FIELDS = frozenset(
    {"cache_control", "container", "diagnostics", "inference_geo", "max_tokens", "messages",
     "metadata", "model", "output_config", "service_tier", "speed", "stop_sequences", "stream",
     "system", "temperature", "thinking", "tool_choice", "tools", "top_k", "top_p",
     "user_profile_id", "workspace_id"}
)  # fmt: skip
Event = tuple[str, dict[str, Any]]


def _with_preamble(answer: SimAnswer, preamble: str) -> SimAnswer:
    """The answer as the client sees it: the preamble block first, citations shifted."""
    shift = len(preamble)
    return SimAnswer(
        text=preamble + answer.text,
        citations=[replace(c, start=c.start + shift, end=c.end + shift) for c in answer.citations],
        mentioned=list(answer.mentioned),
        language=answer.language,
    )


def _citation(citation: SimCitation, draw: Draw) -> dict[str, Any]:
    return {
        "type": "web_search_result_location",
        "url": citation.url,
        "title": citation.title,
        "cited_text": citation.cited_text[:150],  # the quoted source text
        "encrypted_index": f"Eo8BCioIAhgBIiQ{draw.rng.getrandbits(64):016x}",
    }


def _text_blocks(answer: SimAnswer, draw: Draw) -> list[dict[str, Any]]:
    """Uncited glue and cited sentences as separate text blocks, in order."""
    blocks: list[dict[str, Any]] = []
    position = 0
    text = answer.text
    for citation in sorted(answer.citations, key=lambda c: c.start):
        if citation.start < position:  # overlapping spans: cite the block already made
            blocks[-1].setdefault("citations", []).append(_citation(citation, draw))
            continue
        if citation.start > position:
            blocks.append({"type": "text", "text": text[position : citation.start]})
        blocks.append(
            {
                "type": "text",
                "text": text[citation.start : citation.end],
                "citations": [_citation(citation, draw)],
            }
        )
        position = citation.end
    if position < len(text) or not blocks:
        blocks.append({"type": "text", "text": text[position:]})
    return blocks


class AnthropicProtocol(PlatformProtocol):
    name = "anthropic"
    faults = HTTP_FAULTS | STREAM_FAULTS

    # --- error shapes -----------------------------------------------------------------------
    @staticmethod
    def _error(
        status: int, kind: str, message: str, draw: Draw | None, headers: dict[str, str]
    ) -> SimResponse:
        request_id = headers.get("request-id") or _request_id(draw)
        body = {"type": "error", "error": {"type": kind, "message": message}}
        return SimResponse.json(status, body | {"request_id": request_id}, headers)

    def rate_limited(self, draw: Draw) -> SimResponse:
        seconds = float(draw.params.get("retry_after_seconds", draw.profile["retry_after_seconds"]))
        reset = datetime.now(UTC) + timedelta(seconds=seconds)
        message = (
            "This request would exceed the rate limit for your organization of 50 requests "
            "per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits."
        )
        return self._error(
            429,
            "rate_limit_error",
            message,
            draw,
            {
                "retry-after": str(math.ceil(seconds)),
                "anthropic-ratelimit-requests-limit": "50",
                "anthropic-ratelimit-requests-remaining": "0",
                "anthropic-ratelimit-requests-reset": reset.isoformat(timespec="seconds")
                .replace("+00:00", "Z"),
            },
        )  # fmt: skip

    def server_error(self, draw: Draw, *, overloaded: bool = False) -> SimResponse:
        status = int(draw.params.get("status", 529 if overloaded else 500))
        if status == 529:
            return self._error(529, "overloaded_error", "Overloaded", draw, {})
        return self._error(status, "api_error", "Internal server error", draw, {})

    def auth_error(self, draw: Draw) -> SimResponse:
        if int(draw.params.get("status", 401)) == 403:
            message = "Your API key does not have permission to use the specified resource."
            return self._error(403, "permission_error", message, draw, {})
        return self._error(401, "authentication_error", "invalid x-api-key", draw, {})

    # --- requests ---------------------------------------------------------------------------
    def handle(self, request: SimRequest) -> SimResponse:
        if request.method != "POST" or request.path != "/v1/messages":
            return self._error(404, "not_found_error", "Not found", None, {})
        key = request.headers.get("x-api-key") or request.bearer()
        if not key:
            return self._error(
                401, "authentication_error", "x-api-key header is required", None, {}
            )
        if not request.headers.get("anthropic-version"):
            message = "anthropic-version: header is required"
            return self._error(400, "invalid_request_error", message, None, {})
        body = request.json()
        if (problem := self._invalid(body)) is not None:
            return self._error(400, "invalid_request_error", problem, None, {})
        assert isinstance(body, dict)
        question = user_text(body["messages"], last=True, part_type="text")
        draw = self.sim.draw(self.name, question, self.faults)
        headers = self._headers(draw)
        if key.startswith("invalid"):
            return self._finish(self.auth_error(draw), headers, draw)
        if draw.fault == "midstream_error" and not body.get("stream"):
            # Without a stream there is no middle: the failure is the response.
            return self._finish(self.server_error(draw, overloaded=True), headers, draw)
        if (failure := self.http_fault(draw)) is not None:
            return self._finish(failure, headers, draw)

        web_search = any(
            isinstance(t, dict) and str(t.get("type", "")).startswith("web_search_")
            for t in body.get("tools") or []
        )
        thinking = isinstance(body.get("thinking"), dict) and body["thinking"].get("type") == (
            "enabled"
        )
        answer = self.sim.answer_for(question, draw)
        reply = self._message(draw, str(body["model"]), question, answer, web_search, thinking)
        shown = answer
        if web_search:
            shown = _with_preamble(answer, reply["content"][1 if thinking else 0]["text"])
        else:
            shown.citations = []
        self.record(question, draw, shown, reply["id"], headers["request-id"])
        if body.get("stream"):
            chunks = self._stream(draw, reply)
            response = SimResponse(200, {"Content-Type": "text/event-stream"}, chunks=chunks)
            return self._finish(response, headers, draw)
        return self._finish(SimResponse.json(200, reply), headers, draw)

    @staticmethod
    def _invalid(body: Any) -> str | None:
        if not isinstance(body, dict):
            return "request body must be a JSON object"
        if unknown := unknown_fields(body, MESSAGES_FIELDS):
            return f"{unknown[0]}: Extra inputs are not permitted"
        if not isinstance(body.get("model"), str) or not body["model"]:
            return "model: Field required"
        max_tokens = body.get("max_tokens")
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            return "max_tokens: Field required"
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return "messages: Field required"
        thinking = body.get("thinking")
        if isinstance(thinking, dict) and thinking.get("type") == "enabled":
            budget = thinking.get("budget_tokens")
            if not isinstance(budget, int) or budget < MIN_THINKING_BUDGET:
                return f"thinking.enabled.budget_tokens: must be >= {MIN_THINKING_BUDGET}"
            if budget >= max_tokens:
                return "`max_tokens` must be greater than `thinking.budget_tokens`"
        return None

    def _headers(self, draw: Draw) -> dict[str, str]:
        return {
            "request-id": _request_id(draw),
            "anthropic-organization-id": "00000000-0000-4000-8000-00000000a17c",
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-requests-remaining": "49",
        }

    @staticmethod
    def _finish(response: SimResponse, headers: dict[str, str], draw: Draw) -> SimResponse:
        response.headers = headers | response.headers
        response.delay_seconds = draw.latency_seconds
        if response.body.startswith(b'{"type": "error"'):
            # The body's request_id is the header's, as on the real API.
            payload = json.loads(response.body)
            payload["request_id"] = response.headers["request-id"]
            response.body = json.dumps(payload, ensure_ascii=False).encode()
        return response

    # --- answers ----------------------------------------------------------------------------
    def _message(
        self,
        draw: Draw,
        model: str,
        question: str,
        answer: SimAnswer,
        web_search: bool,
        thinking: bool,
    ) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if thinking:
            content.append(
                {
                    "type": "thinking",
                    "thinking": "The user wants a comparison; I should look for current sources.",
                    "signature": f"EqQBCgIYAhIM{draw.rng.getrandbits(96):024x}",
                }
            )
        if web_search:
            chinese = is_cjk(answer.text)
            tool_id = f"srvtoolu_{draw.rng.getrandbits(96):024x}"
            urls = list(dict.fromkeys(c.url for c in answer.citations))
            titles = {c.url: c.title for c in answer.citations}
            # The last result is found by the search and cited by no text block.
            urls.append(UNCITED_SOURCE[0])
            titles[UNCITED_SOURCE[0]] = UNCITED_SOURCE[1]
            query = (searches_for(question) or [""])[0]
            content += [
                {"type": "text", "text": "我来搜索一下。" if chinese else "I'll search for that. "},
                {"type": "server_tool_use", "id": tool_id, "name": "web_search",
                 "input": {"query": query}},
                {"type": "web_search_tool_result", "tool_use_id": tool_id,
                 "content": [
                     {"type": "web_search_result", "url": url, "title": titles[url],
                      "encrypted_content": f"EqgfCioIARgBIiQ{draw.rng.getrandbits(64):016x}",
                      "page_age": "April 3, 2025"}
                     for url in urls
                 ]},
            ]  # fmt: skip
            content += _text_blocks(answer, draw)
        else:
            content.append({"type": "text", "text": answer.text})
        tokens = len(answer.text) // 4 + 1
        usage: dict[str, Any] = {"input_tokens": 24, "output_tokens": tokens}
        if web_search:
            usage["server_tool_use"] = {"web_search_requests": 1, "web_fetch_requests": 0}
        return {
            "id": f"msg_{draw.rng.getrandbits(96):024x}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": usage,
        }

    def _events(self, message: dict[str, Any]) -> list[Event]:
        start = message | {"content": [], "stop_reason": None, "usage": {"input_tokens": 24,
                           "output_tokens": 1}}  # fmt: skip
        events: list[Event] = [("message_start", {"message": start}), ("ping", {})]
        for index, block in enumerate(message["content"]):
            events += self._block_events(index, block)
            if block["type"] == "web_search_tool_result":
                events.append(("ping", {}))
        events += [
            ("message_delta", {"delta": {"stop_reason": message["stop_reason"],
             "stop_sequence": None}, "usage": message["usage"]}),
            ("message_stop", {}),
        ]  # fmt: skip
        return events

    @staticmethod
    def _block_events(index: int, block: dict[str, Any]) -> list[Event]:
        kind = block["type"]
        events: list[Event] = []
        if kind == "text":
            events.append(("content_block_start", {"index": index,
                           "content_block": {"type": "text", "text": ""}}))  # fmt: skip
            for citation in block.get("citations", []):
                delta = {"type": "citations_delta", "citation": citation}
                events.append(("content_block_delta", {"index": index, "delta": delta}))
            text = block["text"]
            for at in range(0, len(text), DELTA_CHARS):
                delta = {"type": "text_delta", "text": text[at : at + DELTA_CHARS]}
                events.append(("content_block_delta", {"index": index, "delta": delta}))
        elif kind == "thinking":
            events.append(("content_block_start", {"index": index,
                           "content_block": {"type": "thinking", "thinking": "",
                                             "signature": ""}}))  # fmt: skip
            for delta in (
                {"type": "thinking_delta", "thinking": block["thinking"]},
                {"type": "signature_delta", "signature": block["signature"]},
            ):
                events.append(("content_block_delta", {"index": index, "delta": delta}))
        elif kind == "server_tool_use":
            events.append(("content_block_start", {"index": index,
                           "content_block": block | {"input": {}}}))  # fmt: skip
            partial = json.dumps(block["input"], ensure_ascii=False)
            for at in range(0, len(partial), JSON_DELTA_CHARS):
                delta = {
                    "type": "input_json_delta",
                    "partial_json": partial[at : at + JSON_DELTA_CHARS],
                }
                events.append(("content_block_delta", {"index": index, "delta": delta}))
        else:  # web_search_tool_result arrives whole: there is no delta type for results
            events.append(("content_block_start", {"index": index, "content_block": block}))
        events.append(("content_block_stop", {"index": index}))
        return events

    def _stream(self, draw: Draw, message: dict[str, Any]) -> list[bytes | float]:
        events = self._events(message)
        first_text = next(
            i for i, (kind, payload) in enumerate(events)
            if kind == "content_block_delta" and payload["delta"]["type"] == "text_delta"
        )  # fmt: skip
        events, stall = cut_stream(draw, events, first_text, lambda: _error_event(draw))
        frames = (
            f"event: {kind}\ndata: {json.dumps({'type': kind} | payload, ensure_ascii=False)}\n\n"
            for kind, payload in events
        )
        return paced(draw, frames, stall)


def _error_event(draw: Draw) -> Event:
    code = str(draw.params.get("code", "overloaded_error"))
    text = "Overloaded" if code == "overloaded_error" else "Internal server error"
    return ("error", {"error": {"type": code, "message": text}})


def _request_id(draw: Draw | None) -> str:
    bits = draw.rng.getrandbits(96) if draw is not None else 0
    return f"req_011C{bits:024x}"
