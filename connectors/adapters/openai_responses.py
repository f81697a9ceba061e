"""OpenAI Responses API with the `web_search` tool (platform_protocols.md §1).

Submit streams (`stream: true`) and keeps the SSE transcript byte for byte; `parse()` derives
the answer from that transcript (or from a non-streaming JSON body), so `reparse` of stored
evidence and the live path agree. A stream is complete only on `response.completed`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..base import (
    Capabilities,
    Citation,
    ErrorClass,
    NormalizedResult,
    SampleRequest,
    SubmitOutcome,
)
from ..citations import make_citation
from ..direct import ALL_MODES, DirectConnector, outcome_from_exchange, unparseable
from ..errors import classify_error_code, error_dict, json_body
from ..streams import SSE_MIME, SseTranscript, is_sse, parse_sse
from ..transport import header_safe

DEEP_THINKING_EFFORT = "high"


@dataclass
class _Part:
    text: str = ""
    annotations: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _StreamState:
    """What a (possibly cut) stream said, event by event."""

    response_id: str | None = None
    parts: dict[tuple[int, int], _Part] = field(default_factory=dict)
    final: dict[str, Any] | None = None  # the response object of the terminal event
    terminal: str | None = None  # "completed" | "failed" | "incomplete" | "error"
    error: dict[str, Any] | None = None
    bad_frames: int = 0

    def part(self, payload: dict[str, Any]) -> _Part:
        key = (int(payload.get("output_index", 0)), int(payload.get("content_index", 0)))
        return self.parts.setdefault(key, _Part())


def _texts_and_annotations(response: dict[str, Any]) -> list[_Part]:
    """output_text parts of message items, in output order."""
    found: list[_Part] = []
    for item in response.get("output") or []:
        if not isinstance(item, dict) or item.get("type") != "message":
            continue
        for content in item.get("content") or []:
            if isinstance(content, dict) and content.get("type") == "output_text":
                annotations = [a for a in content.get("annotations") or [] if isinstance(a, dict)]
                found.append(_Part(str(content.get("text") or ""), annotations))
    return found


def _join_parts(parts: list[_Part]) -> tuple[str, list[Citation]]:
    """The answer text and its url_citation annotations, offsets shifted to the joined text."""
    text = ""
    citations: list[Citation] = []
    for part in parts:
        for annotation in part.annotations:
            if annotation.get("type") != "url_citation" or not annotation.get("url"):
                continue
            start, end = annotation.get("start_index"), annotation.get("end_index")
            citation = make_citation(
                len(citations) + 1,
                str(annotation["url"]),
                title=annotation.get("title"),
                start=start if isinstance(start, int) else None,
                end=end if isinstance(end, int) else None,
                text_length=len(part.text),
            )
            if citation.start is not None:
                citation.start += len(text)
            if citation.end is not None:
                citation.end += len(text)
            citations.append(citation)
        text += part.text
    return text, citations


def _response_error(response: dict[str, Any], terminal: str) -> dict[str, Any]:
    if terminal == "incomplete":
        reason = (response.get("incomplete_details") or {}).get("reason") or "unknown"
        return error_dict(ErrorClass.UPSTREAM_FAILED, f"response incomplete: {reason}")
    error = response.get("error") or {}
    code = error.get("code") if isinstance(error, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return error_dict(classify_error_code(code), str(message or f"response {terminal}"), code=code)


def _read_stream(transcript: SseTranscript) -> _StreamState:
    state = _StreamState()
    for event in transcript.events:
        payload = event.json_object()
        if payload is None:
            state.bad_frames += 1
            continue
        _apply_event(state, event.event if event.event != "message" else "", payload)
        if state.terminal:
            break
    return state


def _apply_event(state: _StreamState, name: str, payload: dict[str, Any]) -> None:
    kind = str(payload.get("type") or name)
    response = payload.get("response")
    if isinstance(response, dict) and response.get("id"):
        state.response_id = str(response["id"])
    if kind == "response.output_text.delta":
        state.part(payload).text += str(payload.get("delta") or "")
    elif kind == "response.output_text.done" and isinstance(payload.get("text"), str):
        state.part(payload).text = payload["text"]
    elif kind == "response.output_text.annotation.added":
        if isinstance(payload.get("annotation"), dict):
            state.part(payload).annotations.append(payload["annotation"])
    elif kind in ("response.completed", "response.failed", "response.incomplete"):
        state.terminal = kind.removeprefix("response.")
        state.final = response if isinstance(response, dict) else {}
        if state.terminal != "completed":
            state.error = _response_error(state.final, state.terminal)
    elif kind == "error" or isinstance(payload.get("error"), dict):
        # The SDK treats any payload with a top-level `error` as a failed stream, and so do we.
        state.terminal = "error"
        nested = payload.get("error")
        error = nested if isinstance(nested, dict) else payload
        code = error.get("code")
        state.error = error_dict(
            classify_error_code(code), str(error.get("message") or "stream error"), code=code
        )


class OpenAIResponsesConnector(DirectConnector):
    platform: ClassVar[str] = "openai"
    default_base_url: ClassVar[str] = "https://api.openai.com"

    def capabilities(self) -> Capabilities:
        return self._capabilities(ALL_MODES)

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
        if request.mode == "deep_thinking":
            body["reasoning"] = {"effort": DEEP_THINKING_EFFORT}
        return body

    def submit(self, request: SampleRequest, *, attempt_no: int = 1) -> SubmitOutcome:
        exchange = self.transport.request(
            "POST",
            "/v1/responses",
            attempt_no=attempt_no,
            headers={
                "Authorization": f"Bearer {self.config.api_key}",
                "Accept": SSE_MIME,
                # Not an idempotency key (OpenAI has none); it lets support find the call.
                "X-Client-Request-Id": header_safe(request.idempotency_key),
            },
            json_body=self.request_body(request),
            stream=True,
            deadline_seconds=self._stream_deadline(),
        )
        return outcome_from_exchange(exchange, request, self.parse)

    @classmethod
    def parse(
        cls, raw: bytes, *, content_type: str = "", sample_id: int | None = None
    ) -> NormalizedResult:
        if is_sse(raw, content_type):
            return cls._parse_stream(raw, content_type or SSE_MIME, sample_id)
        payload = json_body(raw)
        if not isinstance(payload, dict):
            return unparseable(raw, content_type, sample_id, "a Responses API body")
        return cls._parse_json(payload, raw, content_type or "application/json", sample_id)

    @classmethod
    def _parse_stream(cls, raw: bytes, mime: str, sample_id: int | None) -> NormalizedResult:
        state = _read_stream(parse_sse(raw))
        if state.terminal == "completed" and state.final is not None:
            parts = _texts_and_annotations(state.final) or list(state.parts.values())
        else:
            parts = [state.parts[key] for key in sorted(state.parts)]
        text, citations = _join_parts(parts)
        result = NormalizedResult(
            sample_id=sample_id,
            upstream_id=state.response_id,
            collection_state="completed",
            evidence_state="stored",
            answer_text=text,
            raw=raw,
            raw_mime=mime,
            citations=citations,
        )
        if state.bad_frames:
            result.warnings.append("BAD_STREAM_FRAMES")
        if state.terminal is None:
            result.collection_state, result.evidence_state = "truncated", "partial"
            result.error = error_dict(
                ErrorClass.TRUNCATED, "stream ended without response.completed"
            )
        elif state.terminal != "completed":
            result.collection_state, result.evidence_state = "failed", "failed"
            result.error = state.error
        return result

    @classmethod
    def _parse_json(
        cls, payload: dict[str, Any], raw: bytes, mime: str, sample_id: int | None
    ) -> NormalizedResult:
        text, citations = _join_parts(_texts_and_annotations(payload))
        result = NormalizedResult(
            sample_id=sample_id,
            upstream_id=str(payload["id"]) if payload.get("id") else None,
            collection_state="completed",
            evidence_state="stored",
            answer_text=text,
            raw=raw,
            raw_mime=mime,
            citations=citations,
        )
        status = payload.get("status")
        if "error" in payload and payload.get("object") != "response":
            status = "failed"
        if status != "completed":
            result.collection_state, result.evidence_state = "failed", "failed"
            result.error = _response_error(payload, str(status or "failed"))
        return result
