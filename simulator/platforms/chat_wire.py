"""Building Chat Completions responses (the OpenAI wire format that OpenAI Chat, DeepSeek and
Kimi share): `chat.completion` bodies, `chat.completion.chunk` SSE frames ending in
`data: [DONE]`, and the stream faults (truncated stream, `data: {"error": ...}` after the 200).

Each protocol module decides what goes into the chunks; this module only frames them.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from ..faults import Draw
from ..protocol import paced, user_text

DELTA_CHARS = 12
DONE_FRAME = b"data: [DONE]\n\n"
SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}


def question_of(messages: Any) -> str:
    """The first user message's text (a string, or a list of text parts)."""
    return user_text(messages)


def pieces(text: str, size: int = DELTA_CHARS) -> list[str]:
    return [text[start : start + size] for start in range(0, len(text), size)]


def frame(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode()


@dataclass
class ChatReply:
    """One completion to send, streamed or not."""

    id: str
    model: str
    content: str = ""
    reasoning: str = ""
    annotations: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str = "stop"
    usage: dict[str, Any] = field(default_factory=dict)
    created: int = field(default_factory=lambda: int(time.time()))

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning:
            message["reasoning_content"] = self.reasoning
        if self.annotations:
            message["annotations"] = self.annotations
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        return message

    def _envelope(self, kind: str, **fields: Any) -> dict[str, Any]:
        """The fields every body and chunk starts with, then `fields`."""
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model,
                **fields}  # fmt: skip

    def body(self) -> dict[str, Any]:
        choice = {"index": 0, "message": self.message(), "finish_reason": self.finish_reason}
        return self._envelope("chat.completion", choices=[choice], usage=self.usage)

    def chunk(
        self,
        delta: dict[str, Any],
        *,
        finish_reason: str | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason} | extra
        return self._envelope("chat.completion.chunk", choices=[choice])

    def usage_chunk(self) -> dict[str, Any]:
        return self._envelope("chat.completion.chunk", choices=[], usage=self.usage)


def usage_for(question: str, answer: str, reasoning: str = "") -> dict[str, Any]:
    prompt = len(question) // 4 + 8
    completion = (len(answer) + len(reasoning)) // 4 + 1
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if reasoning:
        usage["completion_tokens_details"] = {"reasoning_tokens": len(reasoning) // 4 + 1}
    return usage


def streamed(
    draw: Draw,
    frames: list[bytes],
    *,
    first_text: int,
    error_payload: dict[str, Any],
) -> list[bytes | float]:
    """The frames (the last one `data: [DONE]`) with the draw's stream fault applied:
    `truncate` cuts after the first text frame and never sends [DONE] (with `stall_seconds`
    the connection then stays open and silent); `midstream_error` cuts and sends
    `data: {"error": ...}` instead of the rest."""
    stall = 0.0
    last = len(frames) - 1
    low = min(first_text + 1, last)
    if draw.fault == "truncate":
        frames = frames[: draw.rng.randint(low, last)]
        stall = float(draw.params.get("stall_seconds", 0.0))
    elif draw.fault == "midstream_error":
        frames = [*frames[: draw.rng.randint(low, max(low, last - 1))], frame(error_payload)]
    return paced(draw, frames, stall)
