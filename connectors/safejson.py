"""JSON parsing with a nesting limit, for bytes that came from outside the process.

`json.loads` recurses once per nesting level, so a body of 100,000 `[` escapes every
`except ValueError` as a RecursionError (a traceback, a 500, a parked task). Here a nesting
deeper than `max_depth` is a ValueError like any other malformed JSON, so callers that already
treat "not JSON" as a clean refusal or an unparseable body need no new branch.
"""

from __future__ import annotations

import json
from typing import Any

# Deep enough for every upstream wire format and campaign file we read (they nest < 12 levels).
MAX_DEPTH = 64


class JsonTooDeep(ValueError):
    def __init__(self, max_depth: int) -> None:
        super().__init__(f"JSON nested deeper than {max_depth} levels")
        self.max_depth = max_depth


def depth_exceeds(value: Any, max_depth: int) -> bool:
    """Whether a parsed value nests containers deeper than `max_depth` (walked level by level
    without recursion, so the check itself cannot overflow the stack)."""
    level: list[Any] = [value] if isinstance(value, dict | list) else []
    depth = 0
    while level:
        depth += 1
        if depth > max_depth:
            return True
        # Only containers go on to the next level: scalars, most of a payload, cost one
        # isinstance each and are never stacked.
        below: list[Any] = []
        for container in level:
            children = container.values() if isinstance(container, dict) else container
            below += [child for child in children if isinstance(child, dict | list)]
        level = below
    return False


def _may_exceed(text: str, max_depth: int, start: int = 0, end: int | None = None) -> bool:
    """False when `text[start:end]` has too few brackets to nest deeper than `max_depth` at
    all (brackets inside strings only add to the count). Two C scans of the text settle almost
    every payload we read, each event of a stream included, without walking the parsed value."""
    return text.count("[", start, end) + text.count("{", start, end) > max_depth


def loads(data: str | bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """`json.loads`, refusing nesting beyond `max_depth` with JsonTooDeep (a ValueError).
    Bytes must be UTF-8; anything else raises UnicodeDecodeError (also a ValueError)."""
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    try:
        value = json.loads(text)
    except RecursionError:
        raise JsonTooDeep(max_depth) from None
    if _may_exceed(text, max_depth) and depth_exceeds(value, max_depth):
        raise JsonTooDeep(max_depth)
    return value


def raw_decode(text: str, position: int, *, max_depth: int = MAX_DEPTH) -> tuple[Any, int]:
    """`json.JSONDecoder().raw_decode` (one value starting at `position`, and where it ended),
    with the same nesting limit as `loads`."""
    try:
        value, end = _DECODER.raw_decode(text, position)
    except RecursionError:
        raise JsonTooDeep(max_depth) from None
    if _may_exceed(text, max_depth, position, end) and depth_exceeds(value, max_depth):
        raise JsonTooDeep(max_depth)
    return value, end


_DECODER = json.JSONDecoder()
