"""Gemini API `generateContent` / `streamGenerateContent` (docs/platforms.md §4).

Paths: `/v1beta/models/{model}:generateContent` (one JSON body) and
`/v1beta/models/{model}:streamGenerateContent` (`?alt=sse`: `data: <chunk>` frames separated by
CRLF blank lines, no event names, no sentinel; without `alt=sse`: one JSON array written
incrementally). `/v1/` is served the same way. The key comes in `x-goog-api-key` (or `?key=`).
With `tools: [{"google_search": {}}]` the answer is grounded: `groundingMetadata` (on the
final chunk of a stream) lists `groundingChunks` (`web.uri`, `web.title` = the domain) and
`groundingSupports` whose segments are UTF-8 *byte* offsets, end exclusive, with zero values
omitted as proto3 JSON does; the last chunk is one no support points at (found, not cited),
and `webSearchQueries` are the searches run (content.searches_for). The stream ends with EOF
after the chunk carrying `finishReason`.

Faults: 429 `RESOURCE_EXHAUSTED` with `RetryInfo.retryDelay` in `details` (no Retry-After
header), 500 `INTERNAL`, 503 `UNAVAILABLE`, 403 `PERMISSION_DENIED` (an invalid key is a 400
with `ErrorInfo.reason = API_KEY_INVALID`, as the real API answers), hang, login/error pages
with 200, truncated streams (the `finishReason` chunk never comes) and `data: {"error": ...}`
mid-stream. Real grounding URIs are `vertexaisearch.cloud.google.com` redirects; the simulator
gives the source URL itself so brand domains stay visible in tests and demos.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

from ..content import UNCITED_SOURCE, SimAnswer, searches_for
from ..faults import HTTP_FAULTS, STREAM_FAULTS, Draw
from ..protocol import PlatformProtocol, SimRequest, SimResponse, paced

PATH = re.compile(r"^/(v1beta|v1)/models/([^/:]+):(generateContent|streamGenerateContent)$")
DELTA_CHARS = 24
THOUGHT = "Comparing the providers the sources mention most often."
_STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def _error(
    code: int, message: str, details: list[dict[str, Any]] | None = None, status: str = ""
) -> dict[str, Any]:
    error: dict[str, Any] = {
        "code": code,
        "message": message,
        "status": status or _STATUS_NAMES.get(code, "UNKNOWN"),
    }
    if details:
        error["details"] = details
    return {"error": error}


def _json(status: int, payload: Any) -> SimResponse:
    body = json.dumps(payload, ensure_ascii=False, indent=2).encode()
    return SimResponse(status, {"Content-Type": "application/json; charset=UTF-8"}, body)


def _question(contents: list[Any]) -> str:
    for content in reversed(contents):
        if not isinstance(content, dict) or content.get("role", "user") != "user":
            continue
        return "\n".join(
            str(part.get("text", ""))
            for part in content.get("parts") or []
            if isinstance(part, dict) and "text" in part
        )
    return ""


def _segment(answer: SimAnswer, start: int, end: int) -> dict[str, Any]:
    """A segment in UTF-8 bytes, zero values omitted like proto3 JSON."""
    segment: dict[str, Any] = {}
    start_byte = len(answer.text[:start].encode("utf-8"))
    end_byte = len(answer.text[:end].encode("utf-8"))
    if start_byte:
        segment["startIndex"] = start_byte
    if end_byte:
        segment["endIndex"] = end_byte
    segment["text"] = answer.text[start:end]
    return segment


def _grounding(question: str, answer: SimAnswer, part_index: int) -> dict[str, Any]:
    urls = list(dict.fromkeys(c.url for c in answer.citations))
    supports = []
    for citation in answer.citations:
        segment = _segment(answer, citation.start, citation.end)
        if part_index:
            segment["partIndex"] = part_index
        supports.append({"segment": segment, "groundingChunkIndices": [urls.index(citation.url)]})
    return {
        "searchEntryPoint": {
            "renderedContent": '<style>.container{display:flex}</style><div class="container">'
            f'<a class="chip" href="https://www.google.com/search?q={question[:30]}">'
            f"{question[:30]}</a></div>"
        },
        # The last chunk is a source the search found that no support points at.
        "groundingChunks": [
            {"web": {"uri": url, "title": urlsplit(url).hostname or url}}
            for url in [*urls, UNCITED_SOURCE[0]]
        ],
        "groundingSupports": supports,
        "webSearchQueries": searches_for(question),
    }


class GeminiProtocol(PlatformProtocol):
    name = "gemini"
    faults = HTTP_FAULTS | STREAM_FAULTS

    def rate_limited(self, draw: Draw) -> SimResponse:
        seconds = float(draw.params.get("retry_after_seconds", draw.profile["retry_after_seconds"]))
        message = (
            "You exceeded your current quota, please check your plan and billing details. "
            "For more information on this error, head to: "
            f"https://ai.google.dev/gemini-api/docs/rate-limits. Please retry in {seconds:g}s."
        )
        details: list[dict[str, Any]] = [
            {
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [
                    {
                        "quotaMetric": "generativelanguage.googleapis.com/"
                        "generate_content_free_tier_requests",
                        "quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier",
                        "quotaValue": "10",
                    }
                ],
            },
            {"@type": "type.googleapis.com/google.rpc.Help", "links": [
                {"description": "Learn more about Gemini API quotas",
                 "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}]},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{seconds:g}s"},
        ]  # fmt: skip
        return _json(429, _error(429, message, details))

    def server_error(self, draw: Draw, *, overloaded: bool = False) -> SimResponse:
        status = int(draw.params.get("status", 503 if overloaded else 500))
        if status == 503:
            return _json(503, _error(503, "The model is overloaded. Please try again later."))
        message = "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting"
        return _json(status, _error(status, message))

    def auth_error(self, draw: Draw) -> SimResponse:
        status = int(draw.params.get("status", 403))
        if status == 401:
            message = "Request had invalid authentication credentials."
            return _json(401, _error(401, message))
        message = "Permission denied: Consumer 'api_key:sim' has been suspended."
        return _json(403, _error(403, message))

    @staticmethod
    def _invalid_key() -> SimResponse:
        details: list[dict[str, Any]] = [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "API_KEY_INVALID",
                "domain": "googleapis.com",
                "metadata": {"service": "generativelanguage.googleapis.com"},
            },
            {
                "@type": "type.googleapis.com/google.rpc.LocalizedMessage",
                "locale": "en-US",
                "message": "API key not valid. Please pass a valid API key.",
            },
        ]
        return _json(400, _error(400, "API key not valid. Please pass a valid API key.", details))

    def handle(self, request: SimRequest) -> SimResponse:
        match = PATH.match(request.path)
        if request.method != "POST" or match is None:
            return _json(404, _error(404, "Requested entity was not found."))
        model, method = match.group(2), match.group(3)
        key = request.headers.get("x-goog-api-key") or request.query.get("key", [""])[0]
        if not key:
            message = (
                "Method doesn't allow unregistered callers (callers without established "
                "identity). Please use API Key or other form of API consumer identity to call "
                "this API."
            )
            return _json(403, _error(403, message))
        body = request.json()
        if not isinstance(body, dict):
            return _json(400, _error(400, "Invalid JSON payload received."))
        contents = body.get("contents")
        if not isinstance(contents, list) or not contents:
            message = "* GenerateContentRequest.contents: contents is not specified\n"
            return _json(400, _error(400, message))
        question = _question(contents)
        draw = self.sim.draw(self.name, question, self.faults)
        if key.startswith("invalid"):
            return self._finish(self._invalid_key(), draw)
        streamed = method == "streamGenerateContent"
        if draw.fault == "midstream_error" and not streamed:
            return self._finish(self.server_error(draw), draw)
        if (failure := self.http_fault(draw)) is not None:
            return self._finish(failure, draw)

        tools = body.get("tools") or []
        grounded = any(
            isinstance(t, dict) and ({"google_search", "googleSearch"} & t.keys()) for t in tools
        )
        config = body.get("generationConfig") or {}
        thinking = config.get("thinkingConfig") if isinstance(config, dict) else None
        thoughts = isinstance(thinking, dict) and bool(thinking.get("includeThoughts"))
        answer = self.sim.answer_for(question, draw)
        if not grounded:
            answer.citations = []
        response_id = "".join(
            draw.rng.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
            for _ in range(22)
        )
        self.record(question, draw, answer, response_id, response_id)
        common = {"modelVersion": model, "responseId": response_id}
        if not streamed:
            parts: list[dict[str, Any]] = [{"text": THOUGHT, "thought": True}] if thoughts else []
            parts.append({"text": answer.text})
            candidate: dict[str, Any] = {
                "content": {"parts": parts, "role": "model"},
                "finishReason": "STOP",
            }
            if grounded:
                candidate["groundingMetadata"] = _grounding(question, answer, len(parts) - 1)
            payload = {"candidates": [candidate], "usageMetadata": self._usage(answer)} | common
            return self._finish(_json(200, payload), draw)
        chunks = self._chunks(question, answer, grounded, thoughts, common)
        if request.query.get("alt", [""])[0] == "sse":
            return self._finish(self._sse(draw, chunks), draw)
        return self._finish(self._array(draw, chunks), draw)

    @staticmethod
    def _finish(response: SimResponse, draw: Draw) -> SimResponse:
        response.headers = {"Vary": "Origin, X-Origin, Referer"} | response.headers
        response.delay_seconds = draw.latency_seconds
        return response

    @staticmethod
    def _usage(answer: SimAnswer, final: bool = True) -> dict[str, Any]:
        tokens = len(answer.text) // 4 + 1
        usage: dict[str, Any] = {"promptTokenCount": 9, "totalTokenCount": 9}
        if final:
            usage |= {"candidatesTokenCount": tokens, "totalTokenCount": 9 + tokens,
                      "toolUsePromptTokenCount": 120}  # fmt: skip
        return usage

    def _chunks(
        self,
        question: str,
        answer: SimAnswer,
        grounded: bool,
        thoughts: bool,
        common: dict[str, Any],
    ) -> list[dict[str, Any]]:
        pieces = [answer.text[i : i + DELTA_CHARS] for i in range(0, len(answer.text), DELTA_CHARS)]
        chunks: list[dict[str, Any]] = []
        if thoughts:
            pieces.insert(0, "")
        for number, piece in enumerate(pieces):
            parts: list[dict[str, Any]] = [{"text": piece}]
            if thoughts and number == 0:
                parts = [{"text": THOUGHT, "thought": True}]
            candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}}
            final = number == len(pieces) - 1
            if final:
                candidate["finishReason"] = "STOP"
                if grounded:
                    candidate["groundingMetadata"] = _grounding(question, answer, 0)
            chunk = {"candidates": [candidate], "usageMetadata": self._usage(answer, final)}
            chunks.append(chunk | common)
        return chunks

    def _cut(self, draw: Draw, chunks: list[dict[str, Any]]) -> tuple[list[Any], bool]:
        """The chunks to send after faults, and whether the transport should stall."""
        if draw.fault == "truncate":
            return chunks[: draw.rng.randint(1, len(chunks) - 1)], True
        if draw.fault == "midstream_error":
            status = str(draw.params.get("code", "INTERNAL"))
            code = next((c for c, name in _STATUS_NAMES.items() if name == status), 500)
            message = (
                "An internal error has occurred. Please retry or report in "
                "https://developers.generativeai.google/guide/troubleshooting"
            )
            kept: list[Any] = chunks[: draw.rng.randint(1, len(chunks) - 1)]
            return [*kept, _error(code, message, status=status)], False
        return chunks, False

    def _sse(self, draw: Draw, chunks: list[dict[str, Any]]) -> SimResponse:
        sent, cut = self._cut(draw, chunks)
        frames = (f"data: {json.dumps(chunk, ensure_ascii=False)}\r\n\r\n" for chunk in sent)
        stall = float(draw.params.get("stall_seconds", 0.0)) if cut else 0.0
        return SimResponse(
            200, {"Content-Type": "text/event-stream"}, chunks=paced(draw, frames, stall)
        )

    def _array(self, draw: Draw, chunks: list[dict[str, Any]]) -> SimResponse:
        sent, cut = self._cut(draw, chunks)
        pieces: list[bytes | float] = []
        for number, chunk in enumerate(sent):
            prefix = "[" if number == 0 else ",\r\n"
            pieces.append((prefix + json.dumps(chunk, ensure_ascii=False, indent=2)).encode())
        if not cut:
            pieces.append(b"]")
        return SimResponse(200, {"Content-Type": "application/json; charset=UTF-8"}, chunks=pieces)
