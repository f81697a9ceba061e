"""What a platform protocol module implements, and what the core gives it.

A protocol module turns a `SimRequest` (path relative to `/<platform>/`) into a
`SimResponse`; the core does the HTTP, the faults' randomness, stats and the answer log.
"""

from __future__ import annotations

import abc
import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from .content import SimAnswer, World
from .faults import HTTP_FAULTS, Draw


@dataclass
class SimRequest:
    method: str
    path: str  # after the platform prefix: "/v1/responses"
    query: dict[str, list[str]]
    headers: dict[str, str]  # lowercased names
    body: bytes

    def json(self) -> Any:
        """The body as JSON; None when it is not JSON."""
        try:
            return json.loads(self.body.decode("utf-8")) if self.body else None
        except (UnicodeDecodeError, ValueError):
            return None

    def bearer(self) -> str | None:
        value = self.headers.get("authorization", "")
        return value[7:] if value.lower().startswith("bearer ") else None


@dataclass
class SimResponse:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    # Streamed: the pieces are written with chunked encoding, flushed one by one; a float
    # between them is a pause in seconds.
    chunks: list[bytes | float] | None = None
    delay_seconds: float = 0.0  # latency before the status line
    hang_seconds: float = 0.0  # send nothing for this long, then drop the connection

    @classmethod
    def json(cls, status: int, payload: Any, headers: dict[str, str] | None = None) -> SimResponse:
        body = json.dumps(payload, ensure_ascii=False).encode()
        return cls(status, {"Content-Type": "application/json"} | (headers or {}), body)


class SimContext(Protocol):
    """The core, as protocol modules see it."""

    lock: threading.RLock
    stopping: threading.Event

    @property
    def world(self) -> World: ...

    def draw(self, platform: str, text: str, allowed: frozenset[str]) -> Draw: ...

    def platform_profile(self, platform: str) -> dict[str, Any]: ...

    def record_answer(
        self, platform: str, question: str, draw: Draw, answer: SimAnswer, **extra: Any
    ) -> None: ...

    def answer_for(self, question: str, draw: Draw) -> SimAnswer: ...


def unknown_fields(body: dict[str, Any], known: frozenset[str]) -> list[str]:
    """Top-level request fields the vendor does not know; OpenAI and Anthropic refuse them with
    a 400, so the simulator does too (tests/fidelity checks the lists against the SDKs)."""
    return sorted(set(body) - known)


LOGIN_PAGE = (
    b"<!DOCTYPE html><html><head><title>Log in</title></head><body>"
    b"<h1>Please verify you are human</h1><form action='/login'><div class='captcha'></div>"
    b"<input name='email'><button>Continue</button></form></body></html>"
)
ERROR_PAGE = b"Service temporarily unavailable. Please try again later.\n"


def content_text(content: Any, *, part_type: str | None = None) -> str | None:
    """A message's `content` as text: a string, or the `text` of its parts (those of
    `part_type`, when given) joined by newlines; None when it is neither."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    return "\n".join(
        str(part.get("text", ""))
        for part in content
        if isinstance(part, dict) and part_type in (None, part.get("type"))
    )


def user_text(messages: Any, *, last: bool = False, part_type: str | None = None) -> str:
    """The text of the first (or `last`) user message that has any."""
    found = messages if isinstance(messages, list) else []
    for message in reversed(found) if last else found:
        if isinstance(message, dict) and message.get("role") == "user":
            text = content_text(message.get("content"), part_type=part_type)
            if text is not None:
                return text
    return ""


def all_text(items: Any) -> str:
    """The text of every message item, joined by newlines."""
    texts = [
        content_text(item.get("content") if isinstance(item, dict) else None)
        for item in (items if isinstance(items, list) else [])
    ]
    return "\n".join(text for text in texts if text is not None)


def cut_stream(
    draw: Draw, items: list[Any], first_text: int, failure: Callable[[], Any]
) -> tuple[list[Any], float]:
    """`items` (events or frames) with the draw's stream fault applied, and how long the
    connection then stays open and silent: `truncate` cuts somewhere after the first text (with
    `stall_seconds`, the client's read timeout fires mid-body instead of seeing a clean end);
    `midstream_error` cuts and sends `failure()` instead of the rest."""
    if draw.fault == "truncate":
        cut = items[: draw.rng.randint(first_text + 1, len(items) - 1)]
        return cut, float(draw.params.get("stall_seconds", 0.0))
    if draw.fault == "midstream_error":
        return [*items[: draw.rng.randint(first_text + 1, len(items) - 2)], failure()], 0.0
    return items, 0.0


def paced(draw: Draw, frames: Iterable[str | bytes], stall: float = 0.0) -> list[bytes | float]:
    """Stream frames as `SimResponse.chunks`: each followed by the profile's `chunk_delay_ms`
    pause, then `stall` seconds of silence (a cut stream whose connection stays open)."""
    pause = float(draw.profile.get("chunk_delay_ms", 0)) / 1000.0
    chunks: list[bytes | float] = []
    for frame in frames:
        chunks.append(frame.encode() if isinstance(frame, str) else frame)
        if pause:
            chunks.append(pause)
    if stall:
        chunks.append(stall)
    return chunks


class PlatformProtocol(abc.ABC):
    """One platform's wire protocol. Subclasses set `name` and `faults` and implement
    `handle`; `http_fault` turns the shared HTTP-level faults into this platform's shape."""

    name: ClassVar[str]
    faults: ClassVar[frozenset[str]] = HTTP_FAULTS

    def __init__(self, sim: SimContext) -> None:
        self.sim = sim

    @abc.abstractmethod
    def handle(self, request: SimRequest) -> SimResponse: ...

    def record(
        self,
        question: str,
        draw: Draw,
        answer: SimAnswer,
        upstream_id: str | None,
        request_id: str | None,
        **extra: Any,
    ) -> None:
        """Log the answer this platform meant to give, under its ids (tests compare what a
        connector parsed with it)."""
        self.sim.record_answer(
            self.name, question, draw, answer, upstream_id=upstream_id, request_id=request_id,
            **extra,
        )  # fmt: skip

    def reset(self) -> None:  # noqa: B027 (an optional hook: stateless protocols skip it)
        """Forget per-platform state (tasks, batches); called by POST /_sim/reset."""

    @staticmethod
    def _respond(response: SimResponse, headers: dict[str, str], draw: Draw) -> SimResponse:
        """The response as sent: the platform's headers (the response's own win) after the
        draw's latency."""
        response.headers = headers | response.headers
        response.delay_seconds = draw.latency_seconds
        return response

    def refused(self, key: str | None, headers: dict[str, str], draw: Draw) -> SimResponse | None:
        """The response, as sent, when the call goes no further: an auth error for a missing or
        `invalid…` key, else the draw's HTTP-level fault; None when the call proceeds."""
        if not key or key.startswith("invalid"):
            return self._respond(self.auth_error(draw), headers, draw)
        if (failure := self.http_fault(draw)) is not None:
            return self._respond(failure, headers, draw)
        return None

    # --- shared fault shapes; override where the platform differs ------------------------
    def rate_limited(self, draw: Draw) -> SimResponse:
        seconds = float(draw.params.get("retry_after_seconds", draw.profile["retry_after_seconds"]))
        return SimResponse.json(
            429,
            {"error": {"code": "rate_limited", "message": "Too many requests"}},
            {"Retry-After": f"{seconds:g}"},
        )

    def server_error(self, draw: Draw, *, overloaded: bool = False) -> SimResponse:
        status = int(draw.params.get("status", 503 if overloaded else 500))
        return SimResponse.json(status, {"error": {"code": "server_error", "message": "boom"}})

    def auth_error(self, draw: Draw) -> SimResponse:
        return SimResponse.json(401, {"error": {"code": "invalid_api_key", "message": "bad key"}})

    def http_fault(self, draw: Draw) -> SimResponse | None:
        """The response for an HTTP-level fault, or None when the call proceeds normally."""
        fault = draw.fault
        if fault == "rate_limit":
            return self.rate_limited(draw)
        if fault in ("server_error", "overloaded"):
            return self.server_error(draw, overloaded=fault == "overloaded")
        if fault == "auth_error":
            return self.auth_error(draw)
        if fault == "hang":
            seconds = float(draw.params.get("hang_seconds", draw.profile["hang_seconds"]))
            return SimResponse(200, hang_seconds=seconds)
        if fault == "login_page":
            return SimResponse(200, {"Content-Type": "text/html; charset=utf-8"}, LOGIN_PAGE)
        if fault == "error_page":
            return SimResponse(200, {"Content-Type": "text/plain; charset=utf-8"}, ERROR_PAGE)
        return None
