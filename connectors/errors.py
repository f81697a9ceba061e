"""Turning an upstream's failure into an UpstreamError the retry policy understands.

One classification for every platform (docs/architecture.md). The platform-specific parts are only
where each upstream hides its hints: `retry-after-ms` / `Retry-After` / `x-should-retry`
headers, Gemini's `RetryInfo.retryDelay` in the body, and the request id header names.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Protocol

from . import safejson
from .base import ErrorClass, UpstreamError
from .redaction import redact

REQUEST_ID_HEADERS = ("x-request-id", "request-id", "x-ds-trace-id", "msh-request-id")
MAX_MESSAGE_CHARS = 300

_INVALID_STATUSES = frozenset({400, 404, 413, 415, 422})
_AUTH_STATUSES = frozenset({401, 402, 403})
_TRANSIENT_STATUSES = frozenset({408, 409, 425, 499, 529})
# 429s that waiting will not cure: the account is out of money or quota.
_BILLING_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached", "quota_exceeded"})
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")


def lower_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {key.lower(): value for key, value in headers.items()}


def status_error_class(status_code: int) -> ErrorClass:
    if status_code in _AUTH_STATUSES:
        return ErrorClass.AUTH
    if status_code == 429:
        return ErrorClass.RATE_LIMITED
    if status_code in _TRANSIENT_STATUSES or status_code >= 500:
        return ErrorClass.TRANSIENT
    if status_code in _INVALID_STATUSES or 300 <= status_code < 500:
        # The transport never follows redirects: an API that redirects has a wrong base URL
        # or sends us to a login page. Asking again would get the same answer.
        return ErrorClass.INVALID
    raise ValueError(f"HTTP {status_code} is not an error status")


def json_body(body: bytes) -> Any:
    """The body as JSON, or None when it is not JSON (HTML error pages, empty bodies)."""
    try:
        return safejson.loads(body)
    except ValueError:  # also UnicodeDecodeError and JsonTooDeep
        return None


def _error_object(payload: Any) -> dict[str, Any]:
    # Gemini's non-SSE stream wraps everything in a JSON array.
    if isinstance(payload, list) and payload and isinstance(payload[0], dict):
        payload = payload[0]
    if not isinstance(payload, dict):
        return {}
    error = payload.get("error")
    if isinstance(error, dict):
        return error
    return payload


def parse_duration_seconds(value: Any) -> float | None:
    """A protobuf JSON duration ("1.5s") as seconds."""
    if isinstance(value, dict):  # {"seconds": 1, "nanos": 500000000}
        return float(value.get("seconds", 0)) + float(value.get("nanos", 0)) / 1e9
    if isinstance(value, str) and (match := _DURATION.match(value)):
        return float(match.group(1))
    return None


def retry_info_delay(payload: Any) -> float | None:
    """Gemini / google.rpc: `error.details[@type=RetryInfo].retryDelay`."""
    details = _error_object(payload).get("details")
    if not isinstance(details, list):
        return None
    for detail in details:
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("RetryInfo"):
            return parse_duration_seconds(detail.get("retryDelay"))
    return None


def _retry_after_header(value: str, now: datetime) -> float | None:
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


def retry_after_seconds(
    headers: Mapping[str, str], body: bytes = b"", *, now: datetime | None = None
) -> float | None:
    """The upstream's wait hint, most precise form first."""
    lowered = lower_headers(headers)
    if (ms := lowered.get("retry-after-ms")) is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    if (value := lowered.get("retry-after")) is not None:
        parsed = _retry_after_header(value, now or datetime.now(UTC))
        if parsed is not None:
            return parsed
    return retry_info_delay(json_body(body)) if body else None


def should_retry_header(headers: Mapping[str, str]) -> bool | None:
    value = lower_headers(headers).get("x-should-retry", "").strip().lower()
    return {"true": True, "false": False}.get(value)


def request_id_from(headers: Mapping[str, str], body: bytes = b"") -> str | None:
    lowered = lower_headers(headers)
    for name in REQUEST_ID_HEADERS:
        if lowered.get(name):
            return lowered[name]
    payload = json_body(body) if body else None
    if isinstance(payload, dict):
        for candidate in (payload, _error_object(payload)):
            value = candidate.get("request_id")
            if isinstance(value, str) and value:
                return value
    return None


def error_message(body: bytes, status_code: int) -> str:
    error = _error_object(json_body(body))
    message = error.get("message") if error else None
    if not isinstance(message, str) or not message:
        snippet = body[:120].decode("utf-8", errors="replace").strip()
        message = f"HTTP {status_code}" + (f": {snippet}" if snippet else "")
    return message[:MAX_MESSAGE_CHARS]


def error_code(body: bytes) -> str | None:
    error = _error_object(json_body(body))
    for key in ("code", "type", "status"):
        value = error.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def classify_http_error(
    status_code: int,
    headers: Mapping[str, str],
    body: bytes,
    *,
    egress: str | None = None,
    now: datetime | None = None,
) -> UpstreamError:
    """A non-2xx response as an UpstreamError carrying the hint, request id and raw body."""
    error_class = status_error_class(status_code)
    codes = {str(v) for v in _error_object(json_body(body)).values() if isinstance(v, str)}
    if error_class is ErrorClass.RATE_LIMITED and codes & _BILLING_CODES:
        error_class = ErrorClass.AUTH
    return UpstreamError(
        error_class,
        error_message(body, status_code),
        status_code=status_code,
        retry_after=retry_after_seconds(headers, body, now=now),
        request_id=request_id_from(headers, body),
        raw=body,
        egress=egress,
        should_retry=should_retry_header(headers),
    )


# Error codes seen inside a stream that already answered 200 (OpenAI `response.failed`,
# `event: error`, Anthropic `overloaded_error`, ...). Anything unknown means the upstream itself
# gave up on the task.
_STREAM_CODE_CLASSES: dict[str, ErrorClass] = {
    "rate_limit_exceeded": ErrorClass.RATE_LIMITED,
    "rate_limit_error": ErrorClass.RATE_LIMITED,
    "resource_exhausted": ErrorClass.RATE_LIMITED,
    "server_error": ErrorClass.TRANSIENT,
    "internal_error": ErrorClass.TRANSIENT,
    "api_error": ErrorClass.TRANSIENT,
    "overloaded_error": ErrorClass.TRANSIENT,
    "unavailable": ErrorClass.TRANSIENT,
    "internal": ErrorClass.TRANSIENT,
    "invalid_prompt": ErrorClass.INVALID,
    "invalid_request_error": ErrorClass.INVALID,
    "invalid_argument": ErrorClass.INVALID,
    "authentication_error": ErrorClass.AUTH,
    "permission_error": ErrorClass.AUTH,
    "insufficient_quota": ErrorClass.AUTH,
}


def classify_error_code(code: str | None) -> ErrorClass:
    if not code:
        return ErrorClass.UPSTREAM_FAILED
    return _STREAM_CODE_CLASSES.get(code.lower(), ErrorClass.UPSTREAM_FAILED)


def class_by_prefix(
    code: str | None, prefixes: Mapping[ErrorClass, tuple[str, ...]]
) -> ErrorClass | None:
    """The class whose vendor code prefixes `code` starts with; None when it matches none.
    (No vendor's prefix of one class starts a prefix of another, so order does not matter.)"""
    for error_class, starts in prefixes.items():
        if code and code.startswith(starts):
            return error_class
    return None


def error_dict(error_class: ErrorClass, message: str, **details: Any) -> dict[str, Any]:
    """The `NormalizedResult.error` shape."""
    return {"class": error_class.value, "message": redact(message)[:MAX_MESSAGE_CHARS], **details}


class HttpErrorClassifier(Protocol):
    """`classify_http_error`, or an adapter's refinement of it."""

    def __call__(
        self, status_code: int, headers: dict[str, str], body: bytes, /, *, egress: str
    ) -> UpstreamError: ...


def auth_when(
    refused: Callable[[bytes], bool], *, only: ErrorClass | None = None
) -> HttpErrorClassifier:
    """`classify_http_error`, then AUTH where `refused(body)` says the vendor refused for good:
    quota, spend limit, unpaid-bill or invalid-key errors come as 429, 403 or 400, and neither
    waiting nor asking again cures them. With `only`, an error of that class alone is changed."""

    def classify(status: int, headers: dict[str, str], body: bytes, egress: str) -> UpstreamError:
        error = classify_http_error(status, headers, body, egress=egress)
        if refused(body) and only in (None, error.error_class):
            error.error_class = ErrorClass.AUTH
        return error

    return classify


def auth_by_code(
    code_class: Callable[[str | None], ErrorClass | None], *, only: ErrorClass | None = None
) -> HttpErrorClassifier:
    """`auth_when` the vendor's code table says AUTH."""
    return auth_when(lambda body: code_class(error_code(body)) is ErrorClass.AUTH, only=only)
