"""xAI Grok through the Responses API with the `web_search` agent tool (docs/platforms.md §14).

xAI retired Live Search: `search_parameters` on `/v1/chat/completions` now answers `410 Gone`
("Live search is deprecated. Please switch to the Agent Tools API"). Search with citations is
the server-side `web_search` tool on `POST /v1/responses`, whose wire format is OpenAI's
(`connectors/responses_format.py`): `event:` + `data:` frames, complete only on
`response.completed`; `response.failed` / `response.incomplete` / `event: error` fail it.

Citations: the inline citations, `output_text.annotations[type=url_citation]` with character
offsets into the part's text (the text also carries the `[[N]](url)` links at those spans; the
Responses API returns them by default). The response's top-level `citations` is every URL the
agent encountered while searching, "not every URL will necessarily be referenced in the final
answer" (xAI's Citations guide): it stays in the raw, and the answer's citations are the inline
ones only.

Errors: a non-2xx body is `{"code": "<status text>", "error": "<message>"}` (`error` a string).
An incorrect API key is a **400** ("Incorrect API key provided: ..."); a missing one a 401; 403
a blocked key or team; 404 an unknown model; 422 a malformed field; 429 the rate limit. The
message is the `error` string. xAI documents no request-id header and no retry hint; a 429
still goes through `errors.retry_after_seconds`, so a `Retry-After` is honoured if sent.

Configuration (`ConnectorConfig.extra`), all optional:
    regions              the regions accepted at plan time (the web_search tool takes no
                         location: the region is not sent)
    allowed_domains / excluded_domains   passed to the web_search tool (at most 5 each)
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..base import Capabilities, ErrorClass, NormalizedResult, SampleRequest, UpstreamError
from ..direct import REGIONS, DirectConnector
from ..errors import classify_error_code, classify_http_error, json_body
from ..responses_format import ResponsesDialect, body_result, stream_result
from ..streams import parse_sse

RESPONSES_PATH = "/v1/responses"
# url_citation annotations carry character offsets into their part's text.
DIALECT = ResponsesDialect(
    classify=classify_error_code, citation_types=frozenset({"url_citation"}), offsets=True
)
MAX_DOMAINS = 5
_BAD_KEY = "incorrect api key"


def xai_message(body: bytes) -> str | None:
    """The `error` string of an xAI error body, if that is what the body is."""
    payload = json_body(body)
    if isinstance(payload, dict) and isinstance(payload.get("error"), str) and payload["error"]:
        return str(payload["error"])
    return None


class GrokConnector(DirectConnector):
    platform: ClassVar[str] = "grok"
    default_base_url: ClassVar[str] = "https://api.x.ai"
    body_name: ClassVar[str] = "an xAI Responses API body"
    path: ClassVar[str] = RESPONSES_PATH

    def capabilities(self) -> Capabilities:
        # Grok's models reason on their own; there is no separate deep mode to ask for.
        regions = self._configured_regions(REGIONS)
        return self._capabilities({"web_search", "no_search"}, regions=regions)

    def web_search_tool(self) -> dict[str, Any]:
        tool: dict[str, Any] = {"type": "web_search"}
        for name in ("allowed_domains", "excluded_domains"):
            domains = self.config.extra.get(name)
            if domains:
                tool[name] = [str(domain) for domain in list(domains)[:MAX_DOMAINS]]
        return tool

    def request_body(self, request: SampleRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": request.model or self.config.model,
            "input": request.question,
            "stream": True,
        }
        if request.mode == "web_search":
            body["tools"] = [self.web_search_tool()]
        return body

    @staticmethod
    def _http_error(
        status: int, headers: dict[str, str], body: bytes, /, *, egress: str
    ) -> UpstreamError:
        error = classify_http_error(status, headers, body, egress=egress)
        message = xai_message(body)
        if message is not None:
            error.message = message[:300]
            error.args = (error.message,)
            # xAI answers an incorrect key with a 400: a credentials problem, not a bad request.
            if status == 400 and _BAD_KEY in message.lower():
                error.error_class = ErrorClass.AUTH
        return error

    @classmethod
    def _parse_stream(cls, raw: bytes, mime: str, sample_id: int | None) -> NormalizedResult:
        return stream_result(parse_sse(raw), raw, mime, sample_id, DIALECT)

    @classmethod
    def _parse_json(
        cls, payload: dict[str, Any], raw: bytes, mime: str, sample_id: int | None
    ) -> NormalizedResult:
        status = payload.get("status")
        if "error" in payload and payload.get("object") != "response":
            status = "failed"  # an error body ({"code", "error"}), not a response object
            if isinstance(payload.get("error"), str):
                payload = payload | {"error": {"code": payload.get("code"),
                                               "message": payload["error"]}}  # fmt: skip
        return body_result(payload, str(status or "failed"), raw, mime, sample_id, DIALECT)
