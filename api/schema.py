"""drf-spectacular: the token scheme, the error statuses every operation can answer, and the
schema view (api/views/schema.py)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema

from . import schema_docs as docs


class TokenScheme(OpenApiAuthenticationExtension):
    target_class = "api.auth.TokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "`manage.py api_token USERNAME` prints a token (shown once).",
        }


# What any operation may answer besides its own statuses (api/base.py, api/middleware.py).
_EVERY = {
    "400": "Malformed request: a NUL byte, a bad filter or cursor, an invalid body (`errors`).",
    "401": "No credentials, or a token that is invalid, expired or revoked.",
    "403": "The caller's role does not allow this.",
    "429": "Over the token's rate (`Retry-After`; `X-RateLimit-*` on every answer).",
}
_WITH_PATH_ID = {"404": "Not one of the caller's tenants' rows, or none with this id."}
_WITH_BODY = {
    "413": "The request body is over the size limit.",
    "415": "Not `application/json` (statements: `multipart/form-data`).",
}


class ApiAutoSchema(AutoSchema):
    def _get_response_bodies(self, direction: str = "response") -> dict[str, Any]:
        responses: dict[str, Any] = super()._get_response_bodies(direction)  # type: ignore[arg-type]
        if direction != "response":
            return responses
        for code, why in self._error_statuses().items():
            if code not in responses:
                responses[code] = self._get_response_for_code(docs.ERROR, code)
            responses[code]["description"] = responses[code].get("description") or why
        for response in responses.values():
            response.setdefault("headers", {}).update(
                {name: {"$ref": f"#/components/headers/{name}"} for name in HEADERS}
            )
        return responses

    def _error_statuses(self) -> dict[str, str]:
        statuses = dict(_EVERY)
        if "{" in self.path:
            statuses.update(_WITH_PATH_ID)
        if self.method in ("POST", "PATCH", "PUT"):
            statuses.update(_WITH_BODY)
        return statuses


HEADERS = {
    "X-Request-ID": {
        "schema": {"type": "string"},
        "description": "This request's id (also `request_id` in error bodies and in our logs).",
    },
    "X-RateLimit-Limit": {"schema": {"type": "integer"}, "description": "Requests per window."},
    "X-RateLimit-Remaining": {
        "schema": {"type": "integer"},
        "description": "Requests left in this window.",
    },
    "X-RateLimit-Reset": {
        "schema": {"type": "integer"},
        "description": "Seconds until the window starts again.",
    },
}


def add_headers(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """Postprocessing hook: the headers every response carries, once, as components."""
    result.setdefault("components", {})["headers"] = HEADERS
    return result
