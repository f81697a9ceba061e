"""Building Responses API answers (the wire format OpenAI Responses and Volcengine Ark share):
the `response` object, its `event:` + `data:` stream ending in `response.completed`, and the
stream faults (a cut stream; an `error` or `response.failed` event after the 200).

Each protocol module decides what its message part holds and how its text streams (OpenAI's
annotations carry offsets and follow the text, Ark's carry none and follow what they support);
this module builds the envelope and frames it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from ..content import SimAnswer
from ..faults import Draw
from ..protocol import all_text, cut_stream, paced

Event = tuple[str, dict[str, Any]]
SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8"}


def question_of(value: Any) -> str:
    """`input` is a string or a list of message items; the question is their text."""
    return value if isinstance(value, str) else all_text(value)


def web_search_call(
    draw: Draw,
    query: str,
    *,
    queries: list[str] | None = None,
    sources: list[str] | None = None,
) -> dict[str, Any]:
    """A completed search call: `query`, and where given every query it ran (`queries`) and
    the URLs it found (`sources`, only when the request included
    `web_search_call.action.sources`)."""
    action: dict[str, Any] = {"type": "search", "query": query}
    if queries is not None:
        action["queries"] = queries
    if sources is not None:
        action["sources"] = [{"type": "url", "url": url} for url in sources]
    return {
        "type": "web_search_call",
        "id": f"ws_{draw.rng.getrandbits(64):016x}",
        "status": "completed",
        "action": action,
    }


def message(draw: Draw, part: dict[str, Any]) -> dict[str, Any]:
    """The assistant message item holding one output_text `part`."""
    return {
        "type": "message",
        "id": f"msg_{draw.rng.getrandbits(64):016x}",
        "role": "assistant",
        "status": "completed",
        "content": [part],
    }


def response(
    response_id: str, model: str, output: list[dict[str, Any]], usage: dict[str, Any]
) -> dict[str, Any]:
    """A completed `response` object."""
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": model,
        "output": output,
        "usage": usage,
        "error": None,
        "incomplete_details": None,
    }


def events(
    response: dict[str, Any], item_events: Callable[[int, dict[str, Any]], list[Event]]
) -> list[Event]:
    """The whole stream: created, in_progress, each output item's events, completed."""
    pending = response | {"status": "in_progress", "output": [], "usage": None}
    found: list[Event] = [
        ("response.created", {"response": pending}),
        ("response.in_progress", {"response": pending}),
    ]
    for index, item in enumerate(response["output"]):
        found += item_events(index, item)
    found.append(("response.completed", {"response": response}))
    return found


def item_added(index: int, item: dict[str, Any], **changes: Any) -> Event:
    started = item | {"status": "in_progress"} | changes
    return ("response.output_item.added", {"output_index": index, "item": started})


def item_done(index: int, item: dict[str, Any]) -> Event:
    return ("response.output_item.done", {"output_index": index, "item": item})


def web_search_events(index: int, item: dict[str, Any]) -> list[Event]:
    where = {"output_index": index, "item_id": item["id"]}
    return [
        item_added(index, item),
        ("response.web_search_call.in_progress", where),
        ("response.web_search_call.searching", where),
        ("response.web_search_call.completed", where),
        item_done(index, item),
    ]


def part_at(index: int, item: dict[str, Any]) -> dict[str, Any]:
    """Where the events of a message's (only) output_text part point."""
    return {"output_index": index, "item_id": item["id"], "content_index": 0}


def message_events(
    index: int, item: dict[str, Any], text_events: list[Event], **done: Any
) -> list[Event]:
    """A message item's events around `text_events` (its deltas and annotations): the part
    added empty, then done with its whole text (and `done`'s extra fields)."""
    part = item["content"][0]
    at = part_at(index, item)
    empty = {"type": "output_text", "text": "", "annotations": []}
    return [
        item_added(index, item, content=[]),
        ("response.content_part.added", at | {"part": empty}),
        *text_events,
        ("response.output_text.done", at | {"text": part["text"]} | done),
        ("response.content_part.done", at | {"part": part}),
        item_done(index, item),
    ]


def failure_event(draw: Draw, response: dict[str, Any], code: str, message: str) -> Event:
    """An `error` event or a `response.failed` (the `variant` param, else either)."""
    code = str(draw.params.get("code", code))
    variant = draw.params.get("variant") or draw.rng.choice(["error", "response.failed"])
    if variant == "error":
        return ("error", {"code": code, "message": message, "param": None})
    failed = response | {"status": "failed", "error": {"code": code, "message": message}}
    return ("response.failed", {"response": failed})


def streamed(draw: Draw, stream: list[Event], failure: Callable[[], Event]) -> list[bytes | float]:
    """The stream as SSE frames with the draw's stream fault applied: `truncate` cuts after
    the first content part began (with `stall_seconds` the connection then stays open and
    silent, so the client's read timeout fires mid-body); `midstream_error` cuts and sends
    `failure()` instead of the rest."""
    first_text = next(
        i for i, (kind, _) in enumerate(stream) if kind == "response.content_part.added"
    )
    stream, stall = cut_stream(draw, stream, first_text, failure)
    frames = []
    for sequence, (kind, payload) in enumerate(stream):
        data = {"type": kind, "sequence_number": sequence} | payload
        frames.append(f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n")
    return paced(draw, frames, stall)


def answer_stream(
    draw: Draw,
    response: dict[str, Any],
    answer: SimAnswer,
    item_events: Callable[[int, dict[str, Any], SimAnswer], list[Event]],
    failure: tuple[str, str],
) -> list[bytes | float]:
    """`response` as SSE frames (`events`, each message item's from `item_events`) through
    `streamed`; the mid-stream failure says `failure` = (code, message)."""
    code, message = failure
    stream = events(response, lambda index, item: item_events(index, item, answer))
    return streamed(draw, stream, lambda: failure_event(draw, response, code, message))
