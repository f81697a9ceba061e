"""Error bodies, one shape for every error under /api/ (docs/decisions.md, "API errors"):

    {"detail": "...", "code": "preview_stale", "request_id": "9f1c...",
     "errors": [{"field": "questions[3]", "message": "..."}]}

`code` is stable and machine-readable (the English `detail` may change); `errors` lists the
problems of a 400 with their field paths (those of the console: sampling/planning.py,
billing/reconciliation.py); some errors carry fields of their own next to `detail` (the
shortfall of a 402, the run of a used preview token). `request_id` is also the response's
`X-Request-ID` header and the `http_request_id` of the request's log lines (api/middleware.py).
"""

from __future__ import annotations

import re
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.exceptions import APIException
from rest_framework.response import Response
from rest_framework.views import exception_handler

from .requests import current_request_id

_ROW = re.compile(r"^row (\d+): (?:(upstream_id|amount|currency|occurred_at):? )?(.*)$", re.DOTALL)


class BadCursor(exceptions.ValidationError):
    """A `?cursor=` that is not one the API gave out (api/pagination.py)."""


# Codes for the exceptions DRF and Django raise themselves, where DRF's own is vague; the
# first that matches.
_CODES: dict[type[Exception], str] = {
    BadCursor: "invalid_cursor",
    Http404: "not_found",
    PermissionDenied: "permission_denied",
    exceptions.NotFound: "not_found",
    exceptions.ValidationError: "invalid",
    exceptions.ParseError: "malformed_body",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.Throttled: "throttled",
}


def error_body(detail: str, code: str, **extra: Any) -> dict[str, Any]:
    return {"detail": detail, "code": code, "request_id": current_request_id(), **extra}


def problem_items(problems: list[str]) -> list[dict[str, str]]:
    """ "questions[3]: expected a string" -> {"field": "questions[3]", "message": ...}."""
    items = []
    for problem in problems:
        field, sep, message = problem.partition(": ")
        items.append(
            {"field": field, "message": message} if sep else {"field": "", "message": problem}
        )
    return items


def row_items(problems: list[str]) -> list[dict[str, Any]]:
    """A statement's problems per row: {"row": 3, "field": "amount", "message": ...}."""
    items: list[dict[str, Any]] = []
    for problem in problems:
        match = _ROW.match(problem)
        if match is None:
            field, _, message = problem.partition(": ")
            items.append({"row": None, "field": field, "message": message or problem})
        else:
            row, field, message = match.groups()
            items.append({"row": int(row), "field": field or "", "message": message})
    return items


def invalid(problems: list[str], detail: str = "the request has problems") -> Response:
    body = error_body(detail, "invalid", errors=problem_items(problems))
    return Response(body, status=status.HTTP_400_BAD_REQUEST)


class Conflict(APIException):
    """A 409; `code` names which conflict (the launch has three: docs/decisions.md)."""

    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


class BodyTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "body_too_large"


class DetailedError(APIException):
    """An error with fields next to `detail` (the shortfall, the differences, the run)."""

    def __init__(self, status_code: int, detail: str, *, code: str, **extra: Any) -> None:
        super().__init__(detail, code)
        self.status_code = status_code
        self.extra = extra


def handle(exc: Exception, context: dict[str, Any]) -> Response | None:
    response = exception_handler(exc, context)
    if response is None:
        return None  # a 500: api/middleware.py answers it, logged with the request id
    detail = exc.detail if isinstance(exc, APIException) else str(exc)
    extra: dict[str, Any] = exc.extra if isinstance(exc, DetailedError) else {}
    if isinstance(detail, dict | list):
        # A validation error: the problems by field, as `invalid` lists them.
        extra = {"errors": field_problems(detail)}
        detail = "the request has problems"
    response.data = error_body(str(detail), _code(exc), **extra)
    return response


def _code(exc: Exception) -> str:
    if isinstance(exc, DetailedError | Conflict | BodyTooLarge):
        return str(exc.get_codes())
    for kind, code in _CODES.items():
        if isinstance(exc, kind):
            return code
    if isinstance(exc, APIException):
        return str(exc.default_code)
    return "error"


def field_problems(detail: Any, path: str = "") -> list[dict[str, str]]:
    """DRF's nested {"field": ["message"]} as flat [{"field": "a.b", "message": ...}]."""
    if isinstance(detail, dict):
        return [
            item
            for key, value in detail.items()
            for item in field_problems(value, f"{path}.{key}" if path else str(key))
        ]
    if isinstance(detail, list):
        return [item for value in detail for item in field_problems(value, path)]
    return [{"field": path, "message": str(detail)}]
