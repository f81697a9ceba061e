"""Structured logs: one JSON object per line, with the sample context bound by the step
runner (run_id, sample_id, attempt_no, platform, step, token, request_id), and every
configured secret replaced before the line is written.

`bind()` adds fields for the rest of the current task (a context variable: each worker thread
has its own); `clear()` starts a new task with none.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import UTC, datetime
from functools import cache
from typing import Any
from urllib.parse import urlsplit

REDACTED = "[redacted]"
_context: ContextVar[dict[str, Any]] = ContextVar("geo_log_context", default={})  # noqa: B039

# Environment variables whose values are secrets, by name; URLs may carry a password.
_SECRET_NAME_PARTS = ("API_KEY", "SECRET", "TOKEN", "PASSWORD", "ACCESS_KEY")
_URL_VARIABLES = ("DATABASE_URL", "REDIS_URL")
_MIN_SECRET_LENGTH = 6  # shorter values would redact ordinary words


def bind(**fields: Any) -> None:
    values = {k: v for k, v in fields.items() if v is not None and v != ""}
    _context.set({**_context.get(), **values})


def clear() -> None:
    _context.set({})


def context() -> dict[str, Any]:
    return dict(_context.get())


@cache
def configured_secrets() -> tuple[str, ...]:
    """The secret values of this process's environment, longest first."""
    found = {
        value
        for name, value in os.environ.items()
        if any(part in name.upper() for part in _SECRET_NAME_PARTS)
    }
    for name in _URL_VARIABLES:
        password = urlsplit(os.environ.get(name, "")).password
        if password:
            found.add(password)
    return tuple(sorted((s for s in found if len(s) >= _MIN_SECRET_LENGTH), key=len, reverse=True))


def redact(text: str) -> str:
    for secret in configured_secrets():
        text = text.replace(secret, REDACTED)
    return text


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            **_context.get(),
            "message": record.getMessage(),
        }
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return redact(json.dumps(data, ensure_ascii=False, default=str))


class TextFormatter(logging.Formatter):
    """For people reading a terminal (GEO_LOG_FORMAT=text); secrets redacted all the same."""

    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{k}={v}" for k, v in _context.get().items())
        return redact(f"{super().format(record)} {fields}".rstrip())


def messages(text: str) -> Iterator[str]:
    """The message of each log line in `text` (JSON lines or plain text)."""
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                yield str(json.loads(line).get("message", ""))
                continue
            except ValueError:
                pass
        yield line
