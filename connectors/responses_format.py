"""Reading the Responses API wire format, which OpenAI and Volcengine Ark (Doubao) share.

A Responses stream is `event:` + `data:` frames (`response.created`, `response.output_text.delta`,
`response.output_text.annotation.added`, ...) and is complete only on `response.completed`;
`response.failed` / `response.incomplete` / an `error` event fail it. A non-streaming body is the
`response` object itself. This module turns either into a `NormalizedResult` by one set of
rules, as `chat_format.py` does for Chat Completions. Each adapter keeps its own requests and
says, in a `ResponsesDialect`, how its vendor differs: the error code table, which annotation
types are citations, and whether annotations carry offsets (OpenAI's do, Ark's do not).
The `web_search_call` items give the searches run (`action.query`, `action.queries`) and, when
requested with `include: ["web_search_call.action.sources"]`, the sources found
(`action.sources`); those no annotation cites are `found`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .base import Citation, ErrorClass, NormalizedResult
from .citations import found_sources, make_citation, search_queries
from .errors import error_dict
from .streams import SseTranscript, json_frames

TERMINAL_EVENTS = ("response.completed", "response.failed", "response.incomplete")


@dataclass(frozen=True)
class ResponsesDialect:
    """How one vendor's Responses API differs from the shared reading."""

    classify: Callable[[str | None], ErrorClass]  # the vendor's error code -> class
    citation_types: frozenset[str | None]  # annotation `type`s that are citations (None: absent)
    offsets: bool  # annotations carry start_index / end_index into the part text


@dataclass
class OutputPart:
    """One `output_text` content part: its text and its annotations."""

    text: str = ""
    annotations: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ResponsesStream:
    """What a (possibly cut) stream said, event by event."""

    response_id: str | None = None
    parts: dict[tuple[int, int], OutputPart] = field(default_factory=dict)
    final: dict[str, Any] | None = None  # the response object of the terminal event
    terminal: str | None = None  # "completed" | "failed" | "incomplete" | "error"
    error: dict[str, Any] | None = None
    bad_frames: int = 0
    searches: list[dict[str, Any]] = field(default_factory=list)  # web_search_call items done

    def part(self, payload: dict[str, Any]) -> OutputPart:
        key = (int(payload.get("output_index", 0)), int(payload.get("content_index", 0)))
        return self.parts.setdefault(key, OutputPart())

    def answer_parts(self) -> list[OutputPart]:
        """The final response's message parts when the stream completed, else the parts
        streamed so far, in output order."""
        completed = self.terminal == "completed" and self.final is not None
        if completed and (parts := message_parts(self.final or {})):
            return parts
        return [self.parts[key] for key in sorted(self.parts)]

    def search_items(self) -> list[dict[str, Any]]:
        """The web_search_call items: the final response's when the stream completed, else
        those whose `output_item.done` arrived."""
        if self.terminal == "completed" and self.final is not None and self.final.get("output"):
            return search_items(self.final)
        return self.searches


def search_items(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The response's web_search_call output items, in output order."""
    return [
        item
        for item in response.get("output") or []
        if isinstance(item, dict) and item.get("type") == "web_search_call"
    ]


def searched(
    items: list[dict[str, Any]], citations: list[Citation]
) -> tuple[list[str], list[Citation]]:
    """The queries of web_search_call items of action type `search` (`action.query`, and
    `action.queries` where the engine ran several) and the sources those searches returned
    (`action.sources`, present when the request included `web_search_call.action.sources`)
    that no annotation cites."""
    queries: list[object] = []
    consulted: list[tuple[str, str | None]] = []
    for item in items:
        action = item.get("action")
        if not isinstance(action, dict) or action.get("type", "search") != "search":
            continue
        listed = action.get("queries")
        queries += listed if isinstance(listed, list) else []
        queries.append(action.get("query"))
        for source in action.get("sources") or []:
            if isinstance(source, dict) and isinstance(source.get("url"), str):
                consulted.append((source["url"], None))
    return search_queries(queries), found_sources(citations, consulted)


def message_parts(response: dict[str, Any]) -> list[OutputPart]:
    """output_text parts of message items, in output order (reasoning and search items are
    skipped)."""
    found: list[OutputPart] = []
    for item in response.get("output") or []:
        if not isinstance(item, dict) or item.get("type") != "message":
            continue
        for content in item.get("content") or []:
            if isinstance(content, dict) and content.get("type") == "output_text":
                annotations = [a for a in content.get("annotations") or [] if isinstance(a, dict)]
                found.append(OutputPart(str(content.get("text") or ""), annotations))
    return found


def error_from(error: dict[str, Any], default: str, dialect: ResponsesDialect) -> dict[str, Any]:
    """An upstream error object (`code`, `message`) as a classified error dict."""
    code = str(error["code"]) if error.get("code") else None
    return error_dict(dialect.classify(code), str(error.get("message") or default), code=code)


def response_error(
    response: dict[str, Any], terminal: str, dialect: ResponsesDialect
) -> dict[str, Any]:
    """Why a response that ended `terminal` (failed / incomplete) is not an answer."""
    if terminal == "incomplete":
        reason = (response.get("incomplete_details") or {}).get("reason") or "unknown"
        return error_dict(ErrorClass.UPSTREAM_FAILED, f"response incomplete: {reason}")
    error = response.get("error")
    return error_from(error if isinstance(error, dict) else {}, f"response {terminal}", dialect)


def read_stream(transcript: SseTranscript, dialect: ResponsesDialect) -> ResponsesStream:
    state = ResponsesStream()
    for event, payload in json_frames(transcript.events, state):
        _apply_event(state, str(payload.get("type") or event.event), payload, dialect)
        if state.terminal:
            break
    return state


def _apply_event(
    state: ResponsesStream, kind: str, payload: dict[str, Any], dialect: ResponsesDialect
) -> None:
    response = payload.get("response")
    if isinstance(response, dict) and response.get("id"):
        state.response_id = str(response["id"])
    if kind == "response.output_text.delta":
        state.part(payload).text += str(payload.get("delta") or "")
    elif kind == "response.output_text.done" and isinstance(payload.get("text"), str):
        state.part(payload).text = payload["text"]
    elif kind == "response.output_item.done":
        item = payload.get("item")
        if isinstance(item, dict) and item.get("type") == "web_search_call":
            state.searches.append(item)
    elif kind == "response.output_text.annotation.added":
        if isinstance(payload.get("annotation"), dict):
            state.part(payload).annotations.append(payload["annotation"])
    elif kind in TERMINAL_EVENTS:
        state.terminal = kind.removeprefix("response.")
        state.final = response if isinstance(response, dict) else {}
        if state.terminal != "completed":
            state.error = response_error(state.final, state.terminal, dialect)
    elif kind == "error" or isinstance(payload.get("error"), dict):
        # The OpenAI SDK treats any payload with a top-level `error` as a failed stream.
        state.terminal = "error"
        nested = payload.get("error")
        error = nested if isinstance(nested, dict) else payload
        state.error = error_from(error, "stream error", dialect)


def join_parts(parts: list[OutputPart], dialect: ResponsesDialect) -> tuple[str, list[Citation]]:
    """The answer text and its citations; offsets (where the dialect has them) shifted from
    the part's text to the joined text."""
    text = ""
    citations: list[Citation] = []
    for part in parts:
        for annotation in part.annotations:
            if annotation.get("type") not in dialect.citation_types or not annotation.get("url"):
                continue
            citations.append(_citation(len(citations) + 1, annotation, part, len(text), dialect))
        text += part.text
    return text, citations


def _citation(
    index: int, annotation: dict[str, Any], part: OutputPart, shift: int, dialect: ResponsesDialect
) -> Citation:
    url, title = str(annotation["url"]), annotation.get("title")
    if not dialect.offsets:
        return make_citation(index, url, title=title)
    start, end = annotation.get("start_index"), annotation.get("end_index")
    citation = make_citation(
        index,
        url,
        title=title,
        start=start if isinstance(start, int) else None,
        end=end if isinstance(end, int) else None,
        text_length=len(part.text),
    )
    if citation.start is not None:
        citation.start += shift
    if citation.end is not None:
        citation.end += shift
    return citation


def answer(
    raw: bytes,
    mime: str,
    sample_id: int | None,
    upstream_id: str | None,
    text: str,
    citations: list[Citation],
    *,
    error: dict[str, Any] | None = None,
    state: str = "completed",
) -> NormalizedResult:
    """A result in collection `state`, with the evidence state that goes with it."""
    evidence = {"completed": "stored", "truncated": "partial"}.get(state, "failed")
    return NormalizedResult(
        sample_id=sample_id,
        upstream_id=upstream_id,
        collection_state=state,
        evidence_state=evidence,
        answer_text=text,
        raw=raw,
        raw_mime=mime,
        citations=citations,
        error=error,
    )


def stream_result(
    transcript: SseTranscript,
    raw: bytes,
    mime: str,
    sample_id: int | None,
    dialect: ResponsesDialect,
) -> NormalizedResult:
    """A streamed response: complete only on `response.completed`, truncated without any
    terminal event."""
    stream = read_stream(transcript, dialect)
    text, citations = join_parts(stream.answer_parts(), dialect)
    state, error = "completed", None
    if stream.terminal is None:
        state = "truncated"
        error = error_dict(ErrorClass.TRUNCATED, "stream ended without response.completed")
    elif stream.terminal != "completed":
        state, error = "failed", stream.error
    result = answer(
        raw, mime, sample_id, stream.response_id, text, citations, error=error, state=state
    )
    result.search_queries, result.found = searched(stream.search_items(), citations)
    if stream.bad_frames:
        result.warnings.append("BAD_STREAM_FRAMES")
    return result


def body_result(
    payload: dict[str, Any],
    status: str,
    raw: bytes,
    mime: str,
    sample_id: int | None,
    dialect: ResponsesDialect,
) -> NormalizedResult:
    """A non-streaming response object whose outcome is `status` (the adapter decides how an
    `error` member bears on it)."""
    text, citations = join_parts(message_parts(payload), dialect)
    error = None if status == "completed" else response_error(payload, status, dialect)
    upstream_id = str(payload["id"]) if payload.get("id") else None
    result = answer(
        raw,
        mime,
        sample_id,
        upstream_id,
        text,
        citations,
        error=error,
        state="completed" if error is None else "failed",
    )
    result.search_queries, result.found = searched(search_items(payload), citations)
    return result
