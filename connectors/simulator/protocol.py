"""What a platform protocol module implements, and what the core gives it.

A protocol module turns a `SimRequest` (path relative to `/<platform>/`) into a
`SimResponse`; the core does the HTTP, the faults' randomness, stats and the answer log.
"""

from __future__ import annotations

import abc
import json
import threading
from collections.abc import Iterable
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

    def reset(self) -> None:  # noqa: B027 (an optional hook: stateless protocols skip it)
        """Forget per-platform state (tasks, batches); called by POST /_sim/reset."""

    @staticmethod
    def _respond(response: SimResponse, headers: dict[str, str], draw: Draw) -> SimResponse:
        """The response as sent: the platform's headers (the response's own win) after the
        draw's latency."""
        response.headers = headers | response.headers
        response.delay_seconds = draw.latency_seconds
        return response

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
