"""Google Gemini API with `google_search` grounding (docs/platforms.md §4).

Submit streams (`:streamGenerateContent?alt=sse`) and keeps the SSE transcript byte for byte;
`parse()` derives the answer from that transcript, from a non-streaming `:generateContent` JSON
body, or from the JSON-array stream (`streamGenerateContent` without `alt=sse`).

- Answer text: `candidates[0].content.parts[].text`, skipping `"thought": true` parts; in a
  stream each chunk carries the next pieces.
- Citations: `groundingSupports[].segment` → `groundingChunks[groundingChunkIndices[]].web`.
  Segment offsets are UTF-8 *byte* offsets (start inclusive, end exclusive; proto3 JSON omits
  zero values, so a missing `startIndex` is 0) and are converted to `str` indices. In a
  non-streamed body `partIndex` selects the part; in a stream the parts are pieces of one text,
  so offsets count from the start of the aggregated answer. When the segment's own `text` does
  not sit at the converted offsets it is looked up in the answer (warning
  CITATION_SPAN_RELOCATED). Grounding metadata from every chunk is merged, duplicates dropped.
- Searches: `groundingMetadata.webSearchQueries`. Grounding chunks no support points at are
  sources found but not cited (`found`).
- Completion: the stream is complete when a chunk carried `finishReason` and then EOF came.
  A stream that ends without any `finishReason` is truncated. A data payload `{"error": ...}`
  is a mid-stream failure.
- No request id header exists; the body's `responseId` is both the upstream id and request id.
- Errors: google.rpc bodies; the 429 hint is `details[RetryInfo].retryDelay` (no Retry-After).
  An invalid key is HTTP 400 `INVALID_ARGUMENT` with `ErrorInfo.reason = API_KEY_INVALID`,
  which is an authentication failure, not a bad request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from .. import safejson
from ..base import (
    Capabilities,
    ErrorClass,
    NormalizedResult,
    SampleRequest,
)
from ..citations import (
    CitationList,
    found_sources,
    search_queries,
    utf8_byte_to_char_offset,
)
from ..direct import ALL_MODES, DirectConnector, unparseable
from ..errors import (
    auth_when,
    classify_error_code,
    error_dict,
    json_body,
    retry_info_delay,
    status_error_class,
)
from ..streams import SSE_MIME, is_sse, json_frames, parse_sse

API_VERSION = "v1beta"
DEEP_THINKING_BUDGET = 8192  # within the ranges of the 2.5 Flash and Pro models
# Not errors, but the answer stopped for a reason worth reviewing.
_FINISH_WARNINGS = {"MAX_TOKENS": "MAX_TOKENS"}
_AUTH_REASONS = frozenset({"API_KEY_INVALID", "API_KEY_SERVICE_BLOCKED", "API_KEY_EXPIRED"})


@dataclass(frozen=True)
class _Support:
    """One (segment, source) pair as the upstream sent it."""

    url: str
    title: str | None
    part_index: int | None  # None: offsets count from the start of the aggregated text
    start_byte: int
    end_byte: int
    text: str | None


@dataclass
class _State:
    response_id: str | None = None
    parts: list[tuple[str, bool]] = field(default_factory=list)  # (text, is_thought)
    supports: list[_Support] = field(default_factory=list)
    queries: list[object] = field(default_factory=list)  # groundingMetadata.webSearchQueries
    chunks: list[tuple[str, str | None]] = field(default_factory=list)  # every groundingChunk
    finish_reason: str | None = None
    block_reason: str | None = None
    error: dict[str, Any] | None = None
    bad_frames: int = 0


def _supports(metadata: Any, *, streamed: bool) -> list[_Support]:
    if not isinstance(metadata, dict):
        return []
    chunks = metadata.get("groundingChunks") or []
    found: list[_Support] = []
    for support in metadata.get("groundingSupports") or []:
        segment = support.get("segment") if isinstance(support, dict) else None
        if not isinstance(segment, dict):
            continue
        for index in support.get("groundingChunkIndices") or []:
            if not isinstance(index, int) or not 0 <= index < len(chunks):
                continue
            source = chunks[index] if isinstance(chunks[index], dict) else {}
            web = source.get("web") or source.get("retrievedContext") or {}
            if not isinstance(web, dict) or not web.get("uri"):
                continue
            title = web.get("title")
            found.append(
                _Support(
                    url=str(web["uri"]),
                    title=str(title) if title else None,
                    part_index=None if streamed else int(segment.get("partIndex") or 0),
                    start_byte=int(segment.get("startIndex") or 0),
                    end_byte=int(segment.get("endIndex") or 0),
                    text=segment.get("text") if isinstance(segment.get("text"), str) else None,
                )
            )
    return found


def _chunk_sources(metadata: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(uri, title) of every grounding chunk: what the search found, supported or not."""
    found: list[tuple[str, str | None]] = []
    for chunk in metadata.get("groundingChunks") or []:
        web = (
            (chunk.get("web") or chunk.get("retrievedContext")) if isinstance(chunk, dict) else None
        )
        if isinstance(web, dict) and isinstance(web.get("uri"), str) and web["uri"]:
            title = web.get("title")
            found.append((web["uri"], str(title) if title else None))
    return found


def _apply_chunk(state: _State, payload: dict[str, Any], *, streamed: bool) -> None:
    if isinstance(payload.get("error"), dict):
        state.error = _error_from(payload)
        return
    if payload.get("responseId") and state.response_id is None:
        state.response_id = str(payload["responseId"])
    feedback = payload.get("promptFeedback")
    if isinstance(feedback, dict) and feedback.get("blockReason"):
        state.block_reason = str(feedback["blockReason"])
    candidates = payload.get("candidates") or []
    candidate = candidates[0] if candidates and isinstance(candidates[0], dict) else {}
    content = candidate.get("content")
    for part in (content.get("parts") or []) if isinstance(content, dict) else []:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            state.parts.append((part["text"], bool(part.get("thought"))))
    metadata = candidate.get("groundingMetadata")
    for support in _supports(metadata, streamed=streamed):
        if support not in state.supports:
            state.supports.append(support)
    if isinstance(metadata, dict):
        queries = metadata.get("webSearchQueries")
        state.queries += queries if isinstance(queries, list) else []
        state.chunks += _chunk_sources(metadata)
    if candidate.get("finishReason"):
        state.finish_reason = str(candidate["finishReason"])


def _error_from(payload: dict[str, Any]) -> dict[str, Any]:
    error = payload.get("error")
    error = error if isinstance(error, dict) else {}
    status = error.get("status")
    code = error.get("code")
    error_class = classify_error_code(str(status) if status else None)
    if error_class is ErrorClass.UPSTREAM_FAILED and isinstance(code, int) and code >= 400:
        error_class = status_error_class(code)
    details: dict[str, Any] = {"code": status or code}
    if (delay := retry_info_delay(payload)) is not None:
        details["retry_after"] = delay
    return error_dict(error_class, str(error.get("message") or "stream error"), **details)


def _key_refused(body: bytes) -> bool:
    """Whether an error body's `ErrorInfo.reason` says the API key is invalid or blocked."""
    payload = json_body(body)
    if isinstance(payload, list) and payload:
        payload = payload[0]
    nested = payload.get("error") if isinstance(payload, dict) else None
    details = nested.get("details") if isinstance(nested, dict) else None
    return any(
        isinstance(detail, dict) and detail.get("reason") in _AUTH_REASONS
        for detail in (details if isinstance(details, list) else [])
    )


def _locate(
    answer: str, bases: dict[int, tuple[int, str]], support: _Support
) -> tuple[int, int, bool]:
    """The support's span as `str` indices into the answer, and whether it was relocated."""
    base, text = 0, answer
    if support.part_index is not None and support.part_index in bases:
        base, text = bases[support.part_index]
    start = base + utf8_byte_to_char_offset(text, support.start_byte)
    end = base + utf8_byte_to_char_offset(text, support.end_byte)
    if support.text and answer[start:end] != support.text:
        # Offsets that disagree with the segment's own text: trust the text when it is there,
        # taking the occurrence nearest the reported start.
        hits = []
        at = answer.find(support.text)
        while at >= 0:
            hits.append(at)
            at = answer.find(support.text, at + 1)
        if hits:
            found = min(hits, key=lambda hit: abs(hit - start))
            return found, found + len(support.text), True
    return start, end, False


def _result_parts(state: _State) -> tuple[str, dict[int, tuple[int, str]]]:
    """The answer (thought parts skipped) and, per part index, its offset and text."""
    answer = ""
    bases: dict[int, tuple[int, str]] = {}
    for index, (text, thought) in enumerate(state.parts):
        if thought:
            continue
        bases[index] = (len(answer), text)
        answer += text
    return answer, bases


def _build(state: _State, raw: bytes, mime: str, sample_id: int | None) -> NormalizedResult:
    answer, bases = _result_parts(state)
    citations = CitationList(len(answer))
    warnings: list[str] = []
    for support in state.supports:
        start, end, moved = _locate(answer, bases, support)
        if moved and "CITATION_SPAN_RELOCATED" not in warnings:
            warnings.append("CITATION_SPAN_RELOCATED")
        citations.add(
            support.url,
            title=support.title,
            start=start,
            end=end,
        )
    if state.finish_reason and state.finish_reason != "STOP":
        warnings.append(
            _FINISH_WARNINGS.get(state.finish_reason, f"FINISH_REASON_{state.finish_reason}")
        )
    if state.bad_frames:
        warnings.append("BAD_STREAM_FRAMES")
    result = NormalizedResult.answer(
        raw,
        mime,
        sample_id,
        state.response_id,
        answer,
        citations=citations.items,
        warnings=warnings,
        request_id=state.response_id,
        search_queries=search_queries(state.queries),
        found=found_sources(citations.items, state.chunks),
    )
    if state.error is not None:
        result.fail(state.error)
    elif state.block_reason and not state.parts:
        result.fail(error_dict(ErrorClass.UPSTREAM_FAILED, f"prompt blocked: {state.block_reason}"))
    elif state.finish_reason is None:
        result.cut("stream ended without a finishReason")
    return result


def _json_array_items(raw: bytes) -> tuple[list[Any], bool]:
    """The objects of a JSON-array stream, and whether the array was closed. A cut array
    still yields every object that arrived whole."""
    text = raw.decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    items: list[Any] = []
    position = 1  # after "["
    while True:
        while position < len(text) and text[position] in " \t\r\n,":
            position += 1
        if position >= len(text):
            return items, False
        if text[position] == "]":
            return items, True
        try:
            item, position = safejson.raw_decode(text, position)
        except ValueError:
            return items, False
        items.append(item)


class GeminiConnector(DirectConnector):
    platform: ClassVar[str] = "gemini"
    default_base_url: ClassVar[str] = "https://generativelanguage.googleapis.com"
    params: ClassVar[dict[str, str]] = {"alt": "sse"}
    # No request id header: the body's `responseId` is the request id.
    request_id_header: ClassVar[bool] = False

    def capabilities(self) -> Capabilities:
        # The Gemini API has no user-location setting for google_search: the region is
        # wherever the call comes from, so only "global" is honest.
        return self._capabilities(ALL_MODES, regions={"global"})

    def model(self, request: SampleRequest) -> str:
        return str(request.model or self.config.model or "").removeprefix("models/")

    def request_body(self, request: SampleRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "contents": [{"role": "user", "parts": [{"text": request.question}]}],
        }
        if request.mode != "no_search":
            body["tools"] = [{"google_search": {}}]
        if request.mode == "deep_thinking":
            budget = int(self.config.extra.get("thinking_budget", DEEP_THINKING_BUDGET))
            body["generationConfig"] = {"thinkingConfig": {"thinkingBudget": budget}}
        return body

    def request_path(self, request: SampleRequest) -> str:
        return f"/{API_VERSION}/models/{self.model(request)}:streamGenerateContent"

    def request_headers(self, request: SampleRequest) -> dict[str, str]:
        # The key travels in a header, never in `?key=` (URLs end up in logs).
        return {"x-goog-api-key": self.config.api_key, "Accept": SSE_MIME}

    # An invalid key is a 400 INVALID_ARGUMENT whose ErrorInfo reason says so.
    _http_error = staticmethod(auth_when(_key_refused))

    @classmethod
    def parse(
        cls, raw: bytes, *, content_type: str = "", sample_id: int | None = None
    ) -> NormalizedResult:
        if is_sse(raw, content_type):
            return cls._parse_stream(raw, content_type or SSE_MIME, sample_id)
        mime = content_type or "application/json"
        if raw.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"["):
            items, closed = _json_array_items(raw)
            state = _State()
            for item in items:
                if isinstance(item, dict):
                    _apply_chunk(state, item, streamed=True)
                else:
                    state.bad_frames += 1
            if not closed and state.error is None:
                state.finish_reason = None  # a cut array is a cut stream, whatever it said
            return _build(state, raw, mime, sample_id)
        payload = json_body(raw)
        if not isinstance(payload, dict) or not (
            {"candidates", "promptFeedback", "error"} & payload.keys()
        ):
            return unparseable(raw, content_type, sample_id, "a generateContent body")
        state = _State()
        _apply_chunk(state, payload, streamed=False)
        if state.error is None and state.finish_reason is None:
            state.finish_reason = "STOP"  # a whole JSON body is complete by construction
        return _build(state, raw, mime, sample_id)

    @classmethod
    def _parse_stream(cls, raw: bytes, mime: str, sample_id: int | None) -> NormalizedResult:
        state = _State()
        for _event, payload in json_frames(parse_sse(raw).events, state):
            _apply_chunk(state, payload, streamed=True)
            if state.error is not None:
                break
        return _build(state, raw, mime, sample_id)
