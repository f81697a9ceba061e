"""Readers for streamed answers: Server-Sent Events and NDJSON.

Both are pure functions over the bytes exactly as they came off the wire, so the live path and
an offline `reparse` of stored evidence read a transcript the same way. Nothing here decides
whether a stream is complete; that is each platform's terminator, judged by its adapter.

SSE follows the WHATWG event-stream rules: lines end in CRLF, LF or CR; `field: value` with one
optional space after the colon; several `data:` lines join with "\n"; a blank line dispatches
the event; lines starting with ':' are comments (keep-alives); an event still open at EOF was
never dispatched and is reported separately, because a cut stream often ends exactly there.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from . import safejson

SSE_MIME = "text/event-stream"
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class SseEvent:
    event: str  # "message" when the frame named none
    data: str
    id: str | None = None

    def json(self) -> Any:
        """The data as JSON; raises ValueError when it is not JSON."""
        return safejson.loads(self.data)

    def json_object(self) -> dict[str, Any] | None:
        """The data as a JSON object; None when it is not one (a bad frame)."""
        try:
            payload = safejson.loads(self.data)
        except ValueError:
            return None
        return payload if isinstance(payload, dict) else None


class CountsBadFrames(Protocol):
    bad_frames: int


def json_frames(
    events: Iterable[SseEvent], state: CountsBadFrames
) -> Iterator[tuple[SseEvent, dict[str, Any]]]:
    """Each event whose data is a JSON object, with that object; any other event is a bad
    frame, counted in `state.bad_frames` and skipped."""
    for event in events:
        payload = event.json_object()
        if payload is None:
            state.bad_frames += 1
        else:
            yield event, payload


@dataclass
class SseTranscript:
    events: list[SseEvent] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)  # e.g. "keep-alive", "HTTP_STATUS/200"
    unterminated: SseEvent | None = None  # an event cut off before its blank line
    retry_ms: int | None = None  # the stream's own reconnection hint, when it sent one


def _decode(raw: bytes) -> str:
    # A stream cut in the middle of a multi-byte character must still be readable.
    text = raw.decode("utf-8", errors="replace")
    return text.removeprefix("\ufeff")


def _split_lines(text: str) -> tuple[list[str], bool]:
    """Lines of the text, and whether the last one was terminated by a line break."""
    # Most streams end lines in LF only: a plain split is the same split, without the regex.
    lines = text.split("\n") if "\r" not in text else _LINE_BREAK.split(text)
    ends_with_break = lines[-1] == ""
    if ends_with_break:
        lines.pop()
    return lines, ends_with_break


def parse_sse(raw: bytes) -> SseTranscript:
    """Read a whole SSE transcript."""
    # One pass with the open event in locals: this runs for every line of every answer, so
    # it avoids a buffer object per event and a call per field.
    transcript = SseTranscript()
    events, comments = transcript.events, transcript.comments
    lines, _ = _split_lines(_decode(raw))
    event_type, has_fields = "", False
    data: list[str] = []
    last_id: str | None = None
    for line in lines:
        if line == "":
            if data:  # the spec drops events without data
                events.append(SseEvent(event_type or "message", "\n".join(data), last_id))
            event_type, data, has_fields = "", [], False
            continue
        if line[0] == ":":
            comments.append(line[1:].strip())
            continue
        # `field: value`, one optional space after the colon; no colon: the whole line names
        # a field with an empty value.
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        has_fields = True
        if name == "data":
            data.append(value)
        elif name == "event":
            event_type = value
        elif name == "id" and "\x00" not in value:
            last_id = value
        elif name == "retry" and value.isdigit():
            transcript.retry_ms = int(value)
    if has_fields:
        transcript.unterminated = SseEvent(
            event=event_type or "message", data="\n".join(data), id=last_id
        )
    return transcript


def iter_sse_events(raw: bytes) -> Iterator[SseEvent]:
    """The dispatched events of a transcript, in order."""
    yield from parse_sse(raw).events


def looks_like_sse(raw: bytes) -> bool:
    head = raw.lstrip(b"\xef\xbb\xbf \t\r\n")[:64]
    return head.startswith((b"event:", b"data:", b"id:", b":", b"retry:"))


def is_sse(raw: bytes, content_type: str) -> bool:
    """Whether a body is an SSE transcript: by its content type, or by its first bytes when
    the content type was not recorded."""
    return content_type.startswith(SSE_MIME) or (not content_type and looks_like_sse(raw))


@dataclass
class NdjsonTranscript:
    objects: list[Any] = field(default_factory=list)
    invalid_lines: list[str] = field(default_factory=list)
    ends_with_newline: bool = True  # False: the last line may have been cut


def parse_ndjson(raw: bytes) -> NdjsonTranscript:
    """Read newline-delimited JSON; blank lines are skipped, bad lines are kept for review."""
    lines, ends_with_break = _split_lines(_decode(raw))
    transcript = NdjsonTranscript(ends_with_newline=ends_with_break or not lines)
    for line in lines:
        if not line.strip():
            continue
        try:
            transcript.objects.append(safejson.loads(line))
        except ValueError:
            transcript.invalid_lines.append(line)
    return transcript


def iter_ndjson(raw: bytes) -> Iterator[Any]:
    yield from parse_ndjson(raw).objects
