"""Volcengine Ark (Doubao) (docs/platforms.md §8).

Two surfaces, each with its own request and parser:

* Responses API (default): `POST /api/v3/responses` with `tools: [{"type": "web_search"}]`,
  streamed. SSE `event:` + `data:` frames shaped like OpenAI's; complete only on
  `response.completed`; `response.failed` / `response.incomplete` / `event: error` fail.
  Citations are `output_text.annotations[]` (`type` "url_citation" or "annotation") with url,
  title, site_name ... and **no offsets**: start/end stay None.
* Bots API, when `config.extra["bot_id"]` is set: `POST /api/v3/bots/chat/completions` with the
  bot id as `model` (the web plugin is configured on the bot). Chat-completion chunks with a
  top-level `references[]` on some chunk (merged); complete only on `data: [DONE]`; a
  `data: {"error": {...}}` frame fails. References have no offsets either.

Request id: response header `X-Request-Id` (the client sends `X-Client-Request-Id`). No retry
hint is documented for 429. Error bodies are `{"error": {"code", "message", "param", "type"}}`
with Ark codes (`RateLimitExceeded.EndpointRPMExceeded`, `QuotaExceeded`, ...).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..base import (
    Capabilities,
    Citation,
    ErrorClass,
    NormalizedResult,
    SampleRequest,
)
from ..citations import make_citation
from ..direct import ALL_MODES, DirectConnector, unparseable
from ..errors import auth_by_code, class_by_prefix, classify_error_code, error_dict, json_body
from ..responses_format import ResponsesDialect, answer, body_result, error_from, stream_result
from ..streams import SSE_MIME, SseEvent, SseTranscript, is_sse, json_frames, parse_sse
from ..transport import header_safe

RESPONSES_PATH = "/api/v3/responses"
BOTS_PATH = "/api/v3/bots/chat/completions"

# Ark error codes (docs/platforms.md §8 and the Ark public error code page), by prefix.
_CODE_PREFIXES: dict[ErrorClass, tuple[str, ...]] = {
    ErrorClass.RATE_LIMITED: ("RateLimitExceeded", "ServerOverloaded", "TooManyRequests"),
    # Free quota used up / safe-mode spend limit / unpaid bills: waiting does not help.
    ErrorClass.AUTH: ("QuotaExceeded", "SetLimitExceeded", "AccountOverdueError",
                      "AuthenticationError", "AccessDenied"),
    ErrorClass.TRANSIENT: ("InternalServiceError", "InternalServerError", "ServiceUnavailable"),
    ErrorClass.INVALID: ("MissingParameter", "InvalidParameter", "InvalidEndpoint",
                         "ModelNotOpen", "InputTextRiskDetection"),
    # The answer was withheld by moderation: asking again gets the same.
    ErrorClass.UPSTREAM_FAILED: ("OutputTextRiskDetection",),
}  # fmt: skip


def ark_code_class(code: str | None) -> ErrorClass:
    """The class of an Ark error code; unknown codes fall back to the shared table."""
    return class_by_prefix(code, _CODE_PREFIXES) or classify_error_code(code)


# Ark annotations are "url_citation" or "annotation" (or untyped), and carry no offsets.
DIALECT = ResponsesDialect(
    classify=ark_code_class,
    citation_types=frozenset({"url_citation", "annotation", None}),
    offsets=False,
)


def _object(value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def _citation(index: int, source: dict[str, Any]) -> Citation:
    # Ark gives no offsets for annotations or references.
    return make_citation(index, str(source["url"]), title=source.get("title"))


# --- Bots API ---------------------------------------------------------------------------------
@dataclass
class _BotsState:
    chunk_id: str | None = None
    text: str = ""
    references: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    done: bool = False
    error: dict[str, Any] | None = None
    bad_frames: int = 0

    def add_references(self, references: Any) -> None:
        seen = {r.get("url") for r in self.references}
        for reference in references if isinstance(references, list) else []:
            # Knowledge-base references (doc_id, chunk_id ...) have no url: not web citations.
            if isinstance(reference, dict) and reference.get("url") not in seen | {None, ""}:
                self.references.append(reference)
                seen.add(reference["url"])


def _until_done(events: Iterable[SseEvent], state: _BotsState) -> Iterator[SseEvent]:
    """The events before `data: [DONE]`; reaching it marks the stream done."""
    for event in events:
        if event.data.strip() == "[DONE]":
            state.done = True
            return
        yield event


def _read_bots(transcript: SseTranscript) -> _BotsState:
    state = _BotsState()
    for _event, payload in json_frames(_until_done(transcript.events, state), state):
        if isinstance(payload.get("error"), dict):
            state.error = error_from(payload["error"], "stream error", DIALECT)
            break
        if payload.get("id"):
            state.chunk_id = str(payload["id"])
        state.add_references(payload.get("references"))
        for choice in payload.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = _object(choice.get("delta"))
            state.text += str(delta.get("content") or "")
            if choice.get("finish_reason"):
                state.finish_reason = str(choice["finish_reason"])
    return state


def _finish_error(reason: str) -> dict[str, Any]:
    return error_dict(ErrorClass.UPSTREAM_FAILED, f"answer ended with finish_reason {reason!r}")


class DoubaoConnector(DirectConnector):
    platform: ClassVar[str] = "doubao"
    default_base_url: ClassVar[str] = "https://ark.cn-beijing.volces.com"

    @property
    def bot_id(self) -> str | None:
        value = self.config.extra.get("bot_id")
        return str(value) if value else None

    def capabilities(self) -> Capabilities:
        # A bot's plugins are fixed in the Ark console: it always searches, never "thinks" on
        # request. The Responses API switches search per call and thinking via `thinking`.
        modes = {"web_search"} if self.bot_id else ALL_MODES
        # Beijing endpoint; the search sources (toutiao, douyin, moji) are Chinese.
        return self._capabilities(modes, regions={"cn"})

    def request_body(self, request: SampleRequest) -> dict[str, Any]:
        if self.bot_id:
            return {
                "model": self.bot_id,
                "messages": [{"role": "user", "content": request.question}],
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        body: dict[str, Any] = {
            "model": request.model or self.config.model,
            "input": [{"role": "user", "content": request.question}],
            "stream": True,
            "thinking": {"type": "enabled" if request.mode == "deep_thinking" else "disabled"},
        }
        if request.mode != "no_search":
            body["tools"] = [{"type": "web_search"}]
        return body

    def request_path(self, request: SampleRequest) -> str:
        return BOTS_PATH if self.bot_id else RESPONSES_PATH

    def request_headers(self, request: SampleRequest) -> dict[str, str]:
        # Echoed for tracing; Ark has no idempotency key.
        return self._bearer_headers({"X-Client-Request-Id": header_safe(request.idempotency_key)})

    # `QuotaExceeded` / `SetLimitExceeded` come as 429 but waiting does not cure them.
    _http_error = staticmethod(auth_by_code(ark_code_class, only=ErrorClass.RATE_LIMITED))

    @classmethod
    def parse(
        cls, raw: bytes, *, content_type: str = "", sample_id: int | None = None
    ) -> NormalizedResult:
        streamed = is_sse(raw, content_type)
        mime = content_type or (SSE_MIME if streamed else "application/json")
        if streamed:
            transcript = parse_sse(raw)
            if cls._is_bots_stream(transcript):
                return cls._parse_bots_stream(transcript, raw, mime, sample_id)
            return stream_result(transcript, raw, mime, sample_id, DIALECT)
        payload = json_body(raw)
        if not isinstance(payload, dict):
            return unparseable(raw, content_type, sample_id, "an Ark response body")
        if "choices" in payload:
            return cls._parse_bots_json(payload, raw, mime, sample_id)
        if payload.get("object") == "response" or "output" in payload:
            return cls._parse_responses_json(payload, raw, mime, sample_id)
        if isinstance(payload.get("error"), dict):
            error = error_from(payload["error"], "error", DIALECT)
            return answer(raw, mime, sample_id, None, "", [], error=error, state="failed")
        return unparseable(raw, content_type, sample_id, "an Ark response body")

    @staticmethod
    def _is_bots_stream(transcript: SseTranscript) -> bool:
        for event in transcript.events:
            if event.data.strip() == "[DONE]":
                return True
            if event.event.startswith("response.") or event.event == "error":
                return False
            try:
                payload = event.json()
            except ValueError:
                continue
            if isinstance(payload, dict):
                if str(payload.get("type", "")).startswith("response."):
                    return False
                if "choices" in payload or payload.get("object") == "chat.completion.chunk":
                    return True
        return False

    @classmethod
    def _parse_responses_json(
        cls, payload: dict[str, Any], raw: bytes, mime: str, sample_id: int | None
    ) -> NormalizedResult:
        status = str(payload.get("status") or "failed")
        if isinstance(payload.get("error"), dict) and status == "completed":
            status = "failed"
        return body_result(payload, status, raw, mime, sample_id, DIALECT)

    @classmethod
    def _parse_bots_stream(
        cls, transcript: SseTranscript, raw: bytes, mime: str, sample_id: int | None
    ) -> NormalizedResult:
        state = _read_bots(transcript)
        citations = [_citation(n, ref) for n, ref in enumerate(state.references, start=1)]
        outcome, error = "completed", None
        if state.error is not None:
            outcome, error = "failed", state.error
        elif not state.done:
            outcome = "truncated"
            error = error_dict(ErrorClass.TRUNCATED, "stream ended without data: [DONE]")
        elif state.finish_reason not in (None, "stop"):
            outcome, error = "failed", _finish_error(str(state.finish_reason))
        result = answer(
            raw, mime, sample_id, state.chunk_id, state.text, citations, error=error, state=outcome
        )
        if state.bad_frames:
            result.warnings.append("BAD_STREAM_FRAMES")
        return result

    @classmethod
    def _parse_bots_json(
        cls, payload: dict[str, Any], raw: bytes, mime: str, sample_id: int | None
    ) -> NormalizedResult:
        state = _BotsState()
        state.add_references(payload.get("references"))
        choices = payload.get("choices") or []
        choice = _object(choices[0] if isinstance(choices, list) and choices else None)
        message = _object(choice.get("message"))
        text = str(message.get("content") or "")
        citations = [_citation(n, ref) for n, ref in enumerate(state.references, start=1)]
        reason = choice.get("finish_reason")
        error = None if reason == "stop" else _finish_error(str(reason))
        upstream_id = str(payload["id"]) if payload.get("id") else None
        outcome = "completed" if error is None else "failed"
        return answer(
            raw, mime, sample_id, upstream_id, text, citations, error=error, state=outcome
        )
