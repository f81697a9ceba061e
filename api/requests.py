"""The request id of the HTTP request being answered (api/middleware.py sets it)."""

from __future__ import annotations

import re
import uuid
from contextvars import ContextVar

_request_id: ContextVar[str] = ContextVar("geo_http_request_id", default="")
# A caller's own id is kept when it is a plain token (a proxy's or the integrator's), so their
# logs and ours share it; anything else is replaced, never echoed.
_CALLER_ID = re.compile(r"^[A-Za-z0-9._:-]{8,64}$")


def current_request_id() -> str:
    return _request_id.get()


def start_request(given: str | None) -> str:
    request_id = given if given and _CALLER_ID.match(given) else uuid.uuid4().hex
    _request_id.set(request_id)
    return request_id


def end_request() -> None:
    _request_id.set("")
