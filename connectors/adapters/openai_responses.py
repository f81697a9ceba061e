"""OpenAI Responses API with the `web_search` tool (docs/platforms.md §1).

Submit streams (`stream: true`) and keeps the SSE transcript byte for byte; `parse()` derives
the answer from that transcript (or from a non-streaming JSON body), so `reparse` of stored
evidence and the live path agree. A stream is complete only on `response.completed`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..base import NormalizedResult, SampleRequest
from ..direct import DirectConnector
from ..errors import classify_error_code
from ..responses_format import ResponsesDialect, body_result, stream_result
from ..streams import parse_sse
from ..transport import header_safe

DEEP_THINKING_EFFORT = "high"
# url_citation annotations carry code point offsets into their part's text.
DIALECT = ResponsesDialect(
    classify=classify_error_code, citation_types=frozenset({"url_citation"}), offsets=True
)


class OpenAIResponsesConnector(DirectConnector):
    platform: ClassVar[str] = "openai"
    default_base_url: ClassVar[str] = "https://api.openai.com"
    body_name: ClassVar[str] = "a Responses API body"
    path: ClassVar[str] = "/v1/responses"

    def request_body(self, request: SampleRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": request.model or self.config.model,
            "input": request.question,
            "stream": True,
        }
        if request.mode != "no_search":
            body["tools"] = [
                {
                    "type": "web_search",
                    "user_location": {"type": "approximate", "country": request.region.upper()},
                }
            ]
            # The sources each search returned, beside the queries (found vs cited).
            body["include"] = ["web_search_call.action.sources"]
        if request.mode == "deep_thinking":
            body["reasoning"] = {"effort": DEEP_THINKING_EFFORT}
        return body

    def request_headers(self, request: SampleRequest) -> dict[str, str]:
        # Not an idempotency key (OpenAI has none); it lets support find the call.
        return self._bearer_headers({"X-Client-Request-Id": header_safe(request.idempotency_key)})

    @classmethod
    def _parse_stream(cls, raw: bytes, mime: str, sample_id: int | None) -> NormalizedResult:
        return stream_result(parse_sse(raw), raw, mime, sample_id, DIALECT)

    @classmethod
    def _parse_json(
        cls, payload: dict[str, Any], raw: bytes, mime: str, sample_id: int | None
    ) -> NormalizedResult:
        status = payload.get("status")
        if "error" in payload and payload.get("object") != "response":
            status = "failed"  # an error body, not a response object
        return body_result(payload, str(status or "failed"), raw, mime, sample_id, DIALECT)
