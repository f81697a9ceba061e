"""Error bodies: `{"detail": "...", "errors": [{"field": "questions[3]", "message": "..."}]}`.
Field paths and messages are those of the console (sampling/planning.py,
billing/reconciliation.py)."""

from __future__ import annotations

import re
from typing import Any

from rest_framework import status
from rest_framework.exceptions import APIException
from rest_framework.response import Response
from rest_framework.views import exception_handler

_ROW = re.compile(r"^row (\d+): (?:(upstream_id|amount|currency|occurred_at):? )?(.*)$", re.DOTALL)


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
    return Response(
        {"detail": detail, "errors": problem_items(problems)}, status=status.HTTP_400_BAD_REQUEST
    )


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


class BodyTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "body_too_large"


class DetailedError(APIException):
    """An error with fields next to `detail` (the shortfall, the differences, the run)."""

    def __init__(self, status_code: int, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status_code = status_code
        self.extra = extra


def handle(exc: Exception, context: dict[str, Any]) -> Response | None:
    response = exception_handler(exc, context)
    if response is not None and isinstance(exc, DetailedError):
        response.data = {"detail": str(exc.detail), **exc.extra}
    return response
