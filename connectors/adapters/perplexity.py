"""Perplexity Sonar chat completions (docs/platforms.md §5). Search is always on.

Submit streams (`stream: true`) and keeps the SSE transcript byte for byte; `parse()` derives
the answer from that transcript (or from a non-streaming JSON body).

- Answer text: `choices[0].delta.content` accumulated (falling back to the cumulative
  `choices[0].message.content` of "full" stream mode). A leading `<think>…</think>` section of
  reasoning models is removed (warning REASONING_REMOVED); the raw keeps it.
- Citations: inline `[n]` markers in the text, 1-based into the top-level `search_results[]`
  (url, title), or the legacy `citations[]` URL list when there are no search results. Each
  marker's span is the claim immediately before it (`citations.claim_span_before_marker`);
  the markers stay in the answer text as the platform wrote it. Search results no marker
  points at are sources found but not cited (`found`). No search queries are exposed.
- Completion: a chunk whose choice has a `finish_reason` (`stop`, or `length` with warning
  MAX_TOKENS). `data: [DONE]` is tolerated but does not by itself complete a stream.
  `event: error` (or a data payload with an `error` object) mid-stream fails the collection.
- No request id is documented; `x-request-id` is taken if a response ever carries one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..base import (
    Capabilities,
    Citation,
    ErrorClass,
    NormalizedResult,
    SampleRequest,
)
from ..citations import CitationList, claim_span_before_marker, find_markers, found_sources
from ..direct import DirectConnector
from ..errors import classify_error_code, error_dict, status_error_class
from ..streams import json_frames, parse_sse

DONE = "[DONE]"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


@dataclass
class _State:
    response_id: str | None = None
    deltas: list[str] = field(default_factory=list)
    message: str | None = None  # the latest cumulative message.content
    search_results: list[dict[str, Any]] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)  # legacy `citations`
    finish_reason: str | None = None
    error: dict[str, Any] | None = None
    bad_frames: int = 0


def _apply_chunk(state: _State, payload: dict[str, Any]) -> None:
    if payload.get("id") and state.response_id is None:
        state.response_id = str(payload["id"])
    results = payload.get("search_results")
    if isinstance(results, list) and results:
        state.search_results = [r if isinstance(r, dict) else {} for r in results]
    urls = payload.get("citations")
    if isinstance(urls, list) and urls:
        state.urls = [str(u) if isinstance(u, str) else "" for u in urls]
    choices = payload.get("choices") or []
    choice = choices[0] if choices and isinstance(choices[0], dict) else {}
    delta = choice.get("delta")
    if isinstance(delta, dict) and isinstance(delta.get("content"), str):
        state.deltas.append(delta["content"])
    message = choice.get("message")
    if isinstance(message, dict) and isinstance(message.get("content"), str):
        state.message = message["content"]
    if choice.get("finish_reason"):
        state.finish_reason = str(choice["finish_reason"])


def _error_from(payload: dict[str, Any]) -> dict[str, Any]:
    error = payload.get("error")
    error = error if isinstance(error, dict) else payload
    kind, code = error.get("type"), error.get("code")
    error_class = classify_error_code(str(kind) if kind else None)
    if error_class is ErrorClass.UPSTREAM_FAILED and isinstance(code, int) and code >= 400:
        error_class = status_error_class(code)
    message = str(error.get("message") or "stream error")
    return error_dict(error_class, message, code=kind or code)


def _answer(content: str) -> tuple[str, bool]:
    """The answer without a leading reasoning section, and whether one was removed."""
    stripped = content.lstrip()
    if stripped.startswith(THINK_OPEN) and THINK_CLOSE in stripped:
        return stripped.split(THINK_CLOSE, 1)[1].lstrip(), True
    return content, False


def _citations(text: str, state: _State) -> tuple[list[Citation], int]:
    """One citation per marker that resolves to a source, and the count that did not."""
    citations = CitationList(len(text))
    unresolved = 0
    for marker in find_markers(text):
        index = marker.number - 1
        url, title = "", None
        if 0 <= index < len(state.search_results):
            source = state.search_results[index]
            url, title = str(source.get("url") or ""), source.get("title")
        elif 0 <= index < len(state.urls):
            url = state.urls[index]
        if not url:
            unresolved += 1
            continue
        start, end = claim_span_before_marker(text, marker)
        citations.add(
            url,
            title=str(title) if title else None,
            start=start,
            end=end,
        )
    return citations.items, unresolved


def _build(
    state: _State, raw: bytes, mime: str, sample_id: int | None, *, streamed: bool
) -> NormalizedResult:
    content = "".join(state.deltas) if state.deltas else (state.message or "")
    text, reasoning = _answer(content)
    citations, unresolved = _citations(text, state)
    warnings: list[str] = []
    if reasoning:
        warnings.append("REASONING_REMOVED")
    if unresolved:
        warnings.append("CITATION_MARKER_UNRESOLVED")
    if state.finish_reason == "length":
        warnings.append("MAX_TOKENS")
    if state.bad_frames:
        warnings.append("BAD_STREAM_FRAMES")
    # Every search result (or legacy citation URL) is a source the search returned; those no
    # marker points at were found but not cited.
    consulted = [(str(r.get("url") or ""), r.get("title") or None) for r in state.search_results]
    consulted = consulted or [(url, None) for url in state.urls]
    result = NormalizedResult.answer(
        raw, mime, sample_id, state.response_id, text, citations=citations, warnings=warnings,
        found=found_sources(citations, consulted),
    )  # fmt: skip
    if state.error is not None:
        result.fail(state.error)
    elif streamed and state.finish_reason is None:
        result.cut("stream ended without a finish_reason")
    return result


class PerplexityConnector(DirectConnector):
    platform: ClassVar[str] = "perplexity"
    default_base_url: ClassVar[str] = "https://api.perplexity.ai"
    body_name: ClassVar[str] = "a chat completions body"
    path: ClassVar[str] = "/chat/completions"

    def capabilities(self) -> Capabilities:
        modes = {"web_search", "no_search"}
        # Deep thinking is a different Sonar model; offered only when one is configured.
        if self.config.extra.get("deep_thinking_model"):
            modes.add("deep_thinking")
        return self._capabilities(modes)

    def request_body(self, request: SampleRequest) -> dict[str, Any]:
        model = request.model or self.config.model
        if request.mode == "deep_thinking":
            model = self.config.extra.get("deep_thinking_model") or model
        body: dict[str, Any] = {
            "model": model,
            "messages": [{"role": "user", "content": request.question}],
            "stream": True,
            "web_search_options": {"user_location": {"country": request.region.upper()}},
        }
        if request.mode == "no_search":
            body["disable_search"] = True
            del body["web_search_options"]
        return body

    @classmethod
    def _is_body(cls, payload: dict[str, Any]) -> bool:
        return bool({"choices", "error"} & payload.keys())

    @classmethod
    def _parse_json(
        cls, payload: dict[str, Any], raw: bytes, mime: str, sample_id: int | None
    ) -> NormalizedResult:
        state = _State()
        if isinstance(payload.get("error"), dict):
            state.error = _error_from(payload)
        else:
            _apply_chunk(state, payload)
        return _build(state, raw, mime, sample_id, streamed=False)

    @classmethod
    def _parse_stream(cls, raw: bytes, mime: str, sample_id: int | None) -> NormalizedResult:
        state = _State()
        # `data: [DONE]` is tolerated, and says nothing.
        frames = [event for event in parse_sse(raw).events if event.data.strip() != DONE]
        for event, payload in json_frames(frames, state):
            if event.event == "error" or isinstance(payload.get("error"), dict):
                state.error = _error_from(payload)
                break
            _apply_chunk(state, payload)  # chunks after finish_reason may still add sources
        return _build(state, raw, mime, sample_id, streamed=True)
