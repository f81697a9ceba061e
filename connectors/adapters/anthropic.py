"""Anthropic Messages API with the `web_search` server tool (docs/platforms.md §3).

Submit streams (`stream: true`) and keeps the SSE transcript byte for byte; `parse()` derives
the answer from that transcript (or from a non-streaming JSON body), so `reparse` of stored
evidence and the live path agree.

- Answer text: every `type=text` content block, in index order, concatenated.
- Citations: Anthropic gives no offsets; a `web_search_result_location` citation belongs to the
  text block carrying it, so its span is that block's character span inside the answer.
  (`cited_text` is the quoted *source* text, not answer text, and is never used for offsets.)
- Searches: each `server_tool_use` block named `web_search` carries its `input.query` (streamed
  as `input_json_delta` pieces); the `web_search_result`s of `web_search_tool_result` blocks
  that no text block cites are sources found but not cited (`found`).
- A stream is complete only on `event: message_stop`; `ping` events are keep-alives;
  `event: error` mid-stream fails the collection with the classified `error.type`.
- Request id: the `request-id` header (every response), else the body's `request_id`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .. import safejson
from ..base import (
    Citation,
    ErrorClass,
    NormalizedResult,
    SampleRequest,
)
from ..citations import CitationList, found_sources, search_queries
from ..direct import DirectConnector, failed
from ..errors import auth_when, classify_error_code, error_dict, json_body
from ..streams import SSE_MIME, SseTranscript, json_frames, parse_sse

API_VERSION = "2023-06-01"
WEB_SEARCH_TOOL = "web_search_20250305"
DEFAULT_MAX_TOKENS = 4096
DEEP_THINKING_BUDGET = 8192  # extended thinking; max_tokens must exceed it
DEFAULT_MAX_SEARCHES = 5
CITATION_TYPE = "web_search_result_location"
# stop_reason values that end a complete message but deserve a note.
_STOP_WARNINGS = {
    "max_tokens": "MAX_TOKENS",
    "refusal": "REFUSAL",
    "model_context_window_exceeded": "CONTEXT_WINDOW_EXCEEDED",
}
# A spend limit 429 does not clear by waiting.
_SPEND_LIMIT_CODES = frozenset({"enforced_spend_limit_reached"})


@dataclass
class _Block:
    kind: str
    text: str = ""
    citations: list[dict[str, Any]] = field(default_factory=list)
    search_error: str | None = None  # web_search_tool_result_error.error_code
    query: str | None = None  # a web_search server_tool_use's input.query
    partial_json: str = ""  # a streamed server_tool_use's input, as its deltas arrive
    results: list[tuple[str, str | None]] = field(default_factory=list)  # (url, title)


@dataclass
class _StreamState:
    """What a (possibly cut) stream said, event by event."""

    message_id: str | None = None
    request_id: str | None = None
    blocks: dict[int, _Block] = field(default_factory=dict)
    stop_reason: str | None = None
    terminal: str | None = None  # "completed" | "error"
    error: dict[str, Any] | None = None
    bad_frames: int = 0


def _block_from(content: dict[str, Any]) -> _Block:
    kind = str(content.get("type") or "")
    block = _Block(kind)
    if kind == "text":
        block.text = str(content.get("text") or "")
        block.citations = [c for c in content.get("citations") or [] if isinstance(c, dict)]
    elif kind == "web_search_tool_result":
        result = content.get("content")
        if isinstance(result, dict) and result.get("type") == "web_search_tool_result_error":
            block.search_error = str(result.get("error_code") or "unknown")
        for item in result if isinstance(result, list) else []:
            if isinstance(item, dict) and isinstance(item.get("url"), str):
                title = item.get("title")
                block.results.append((item["url"], str(title) if title else None))
    elif kind == "server_tool_use" and content.get("name") == "web_search":
        block.query = _query_of(content.get("input"))
    return block


def _query_of(tool_input: Any) -> str | None:
    query = tool_input.get("query") if isinstance(tool_input, dict) else None
    return query if isinstance(query, str) else None


def _searched(blocks: list[_Block], citations: list[Citation]) -> dict[str, Any]:
    """The web_search tool uses' queries, and the search results no text block cites."""
    queries: list[object] = []
    for block in blocks:
        if block.kind == "server_tool_use" and block.query is None and block.partial_json:
            # A streamed tool use: its input is the concatenated input_json_delta.
            with contextlib.suppress(ValueError):
                block.query = _query_of(safejson.loads(block.partial_json))
        queries.append(block.query)
    consulted = [result for block in blocks for result in block.results]
    return {
        "search_queries": search_queries(queries),
        "found": found_sources(citations, consulted),
    }


def _join_blocks(blocks: list[_Block]) -> tuple[str, list[Citation]]:
    """The answer text and its citations, each spanning the text block that carries it."""
    text = ""
    citations = CitationList()
    for block in blocks:
        if block.kind != "text":
            continue
        start, end = len(text), len(text) + len(block.text)
        for citation in block.citations:
            if citation.get("type", CITATION_TYPE) != CITATION_TYPE or not citation.get("url"):
                continue
            citations.add(str(citation["url"]), title=citation.get("title"), start=start, end=end)
        text += block.text
    return text, citations.items


def _warnings(blocks: list[_Block], stop_reason: str | None) -> list[str]:
    found = [f"WEB_SEARCH_ERROR:{b.search_error}" for b in blocks if b.search_error]
    if stop_reason in _STOP_WARNINGS:
        found.append(_STOP_WARNINGS[stop_reason])
    return found


def _error_from(payload: dict[str, Any]) -> dict[str, Any]:
    """`{"type": "error", "error": {"type", "message"}}` as a NormalizedResult error."""
    error = payload.get("error")
    error = error if isinstance(error, dict) else {}
    kind = error.get("type")
    code = str(kind) if kind else None
    return error_dict(
        classify_error_code(code), str(error.get("message") or "stream error"), code=code
    )


def _spend_limit(body: bytes) -> bool:
    """A 429 whose `error.details.error_code` is a spend limit, which waiting does not clear."""
    payload = json_body(body)
    nested = payload.get("error") if isinstance(payload, dict) else None
    details = nested.get("details") if isinstance(nested, dict) else None
    return isinstance(details, dict) and details.get("error_code") in _SPEND_LIMIT_CODES


def _read_stream(transcript: SseTranscript) -> _StreamState:
    state = _StreamState()
    frames = [event for event in transcript.events if event.event != "ping"]  # keep-alives
    for event, payload in json_frames(frames, state):
        _apply_event(state, event.event if event.event != "message" else "", payload)
        if state.terminal:
            break
    return state


def _apply_event(state: _StreamState, name: str, payload: dict[str, Any]) -> None:
    kind = str(payload.get("type") or name)
    index = payload.get("index")
    if kind == "message_start":
        message = payload.get("message")
        if isinstance(message, dict) and message.get("id"):
            state.message_id = str(message["id"])
    elif kind == "content_block_start" and isinstance(index, int):
        content = payload.get("content_block")
        state.blocks[index] = _block_from(content if isinstance(content, dict) else {})
    elif kind == "content_block_delta" and isinstance(index, int):
        block = state.blocks.setdefault(index, _Block("text"))
        delta = payload.get("delta")
        delta = delta if isinstance(delta, dict) else {}
        if delta.get("type") == "text_delta":
            block.text += str(delta.get("text") or "")
        elif delta.get("type") == "citations_delta" and isinstance(delta.get("citation"), dict):
            block.citations.append(delta["citation"])
        elif delta.get("type") == "input_json_delta" and block.kind == "server_tool_use":
            block.partial_json += str(delta.get("partial_json") or "")
        # input_json_delta, thinking_delta, signature_delta: not answer text
    elif kind == "message_delta":
        delta = payload.get("delta")
        if isinstance(delta, dict) and delta.get("stop_reason"):
            state.stop_reason = str(delta["stop_reason"])
    elif kind == "message_stop":
        state.terminal = "completed"
    elif kind == "error":
        state.terminal = "error"
        state.error = _error_from(payload)
        if isinstance(payload.get("request_id"), str):
            state.request_id = payload["request_id"]
    # ping, content_block_stop and unknown future events carry nothing we keep


class AnthropicConnector(DirectConnector):
    platform: ClassVar[str] = "anthropic"
    default_base_url: ClassVar[str] = "https://api.anthropic.com"
    body_name: ClassVar[str] = "a Messages API body"
    # The request id is the `request-id` header, else the one an error event carried.
    path: ClassVar[str] = "/v1/messages"

    def request_body(self, request: SampleRequest) -> dict[str, Any]:
        max_tokens = int(self.config.extra.get("max_tokens", DEFAULT_MAX_TOKENS))
        body: dict[str, Any] = {
            "model": request.model or self.config.model,
            "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": request.question}],
            "stream": True,
        }
        if request.mode != "no_search":
            body["tools"] = [
                {
                    "type": WEB_SEARCH_TOOL,
                    "name": "web_search",
                    "max_uses": int(self.config.extra.get("max_searches", DEFAULT_MAX_SEARCHES)),
                    "user_location": {"type": "approximate", "country": request.region.upper()},
                }
            ]
        if request.mode == "deep_thinking":
            budget = int(self.config.extra.get("thinking_budget", DEEP_THINKING_BUDGET))
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
            body["max_tokens"] = max(max_tokens, budget + DEFAULT_MAX_TOKENS)
        return body

    def request_headers(self, request: SampleRequest) -> dict[str, str]:
        return {"x-api-key": self.config.api_key, "anthropic-version": API_VERSION,
                "Accept": SSE_MIME}  # fmt: skip

    _http_error = staticmethod(auth_when(_spend_limit, only=ErrorClass.RATE_LIMITED))

    @classmethod
    def _is_body(cls, payload: dict[str, Any]) -> bool:
        return payload.get("type") in ("message", "error")

    @classmethod
    def _parse_stream(cls, raw: bytes, mime: str, sample_id: int | None) -> NormalizedResult:
        state = _read_stream(parse_sse(raw))
        blocks = [state.blocks[index] for index in sorted(state.blocks)]
        text, citations = _join_blocks(blocks)
        result = NormalizedResult.answer(
            raw,
            mime,
            sample_id,
            state.message_id,
            text,
            citations=citations,
            request_id=state.request_id,
            warnings=_warnings(blocks, state.stop_reason),
            **_searched(blocks, citations),
        )
        if state.bad_frames:
            result.warnings.append("BAD_STREAM_FRAMES")
        if state.terminal is None:
            result.cut("stream ended without message_stop")
        elif state.terminal == "error":
            result.fail(state.error)
        elif state.stop_reason == "pause_turn":
            result.cut("stop_reason pause_turn: the server tool loop paused")
        return result

    @classmethod
    def _parse_json(
        cls, payload: dict[str, Any], raw: bytes, mime: str, sample_id: int | None
    ) -> NormalizedResult:
        if payload.get("type") == "error":
            request_id = payload.get("request_id")
            failure = failed(raw, mime, sample_id, _error_from(payload))
            failure.request_id = request_id if isinstance(request_id, str) else None
            return failure
        blocks = [_block_from(c) for c in payload.get("content") or [] if isinstance(c, dict)]
        text, citations = _join_blocks(blocks)
        stop_reason = payload.get("stop_reason")
        warnings = _warnings(blocks, stop_reason if isinstance(stop_reason, str) else None)
        message_id = str(payload["id"]) if payload.get("id") else None
        result = NormalizedResult.answer(
            raw, mime, sample_id, message_id, text, citations=citations, warnings=warnings,
            **_searched(blocks, citations),
        )  # fmt: skip
        if stop_reason == "pause_turn":
            result.cut("stop_reason pause_turn: the server tool loop paused")
        return result
