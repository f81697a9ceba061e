"""Alibaba DashScope native text generation with `enable_search` (docs/platforms.md §9).

Submit streams (`X-DashScope-SSE: enable`, `incremental_output: true`) and keeps the SSE
transcript byte for byte; `parse()` reads that transcript or a non-streaming JSON body.

Stream frames are `id:` / `event:result` / `:HTTP_STATUS/200` (a comment, ignored) / `data:`.
There is no `[DONE]`: a stream is complete only on a frame whose
`output.choices[0].finish_reason` is a real reason (`stop`); until then it is the *string*
`"null"`. A failure after the 200 is `event:error` + `:HTTP_STATUS/<code>` +
`data:{"code","message","request_id"}`.

Citations: `[n]` markers in the text (citation_format `[<number>]`) refer to
`output.search_info.search_results[index=n]`; each marker's span is the claim before it
(`citations.claim_span_before_marker`). Search results no marker refers to are kept as citations
without offsets. The request id is `x-request-id` = body `request_id`; DashScope has no other
id, so it is also the upstream id. No retry hint (Retry-After) is sent on 429.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..base import (
    Capabilities,
    Citation,
    ErrorClass,
    NormalizedResult,
    SampleRequest,
)
from ..citations import CitationList, claim_span_before_marker, find_markers
from ..direct import ALL_MODES, DirectConnector
from ..errors import auth_by_code, class_by_prefix, error_dict, status_error_class
from ..streams import SseTranscript, json_frames, parse_sse

PATH = "/api/v1/services/aigc/text-generation/generation"
CITATION_FORMAT = "[<number>]"
_HTTP_STATUS = re.compile(r"^HTTP_STATUS/(\d{3})$")
_NOT_FINISHED = (None, "", "null")

# DashScope error codes (docs/platforms.md §9), by prefix.
_CODE_PREFIXES: dict[ErrorClass, tuple[str, ...]] = {
    ErrorClass.RATE_LIMITED: ("Throttling",),
    ErrorClass.AUTH: ("Arrearage", "InvalidApiKey", "AccessDenied", "insufficient_quota",
                      "invalid_api_key"),
    ErrorClass.TRANSIENT: ("InternalError", "ServiceUnavailable", "RequestTimeOut"),
    ErrorClass.INVALID: ("InvalidParameter", "ModelNotFound", "NotFound"),
}  # fmt: skip


def dashscope_code_class(code: str | None) -> ErrorClass | None:
    """The class a DashScope error code implies; None when the code says nothing we know."""
    return class_by_prefix(code, _CODE_PREFIXES)


def _object(value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def _message_text(message: Any) -> str:
    """`message.content` is a string, or (multimodal models) a list of `{"text": ...}`."""
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return ""


def _choice(output: dict[str, Any]) -> tuple[str, Any]:
    """(text, finish_reason) of the first choice; `result_format: text` bodies too."""
    choices = output.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return _message_text(choices[0].get("message")), choices[0].get("finish_reason")
    return str(output.get("text") or ""), output.get("finish_reason")


def _search_results(output: dict[str, Any]) -> list[dict[str, Any]]:
    info = output.get("search_info")
    results = info.get("search_results") if isinstance(info, dict) else None
    return [r for r in results or [] if isinstance(r, dict) and r.get("url")]


def _citations(text: str, sources: dict[int, dict[str, Any]]) -> tuple[list[Citation], bool]:
    """One citation per marker that names a known source (span = the claim before it), then
    the sources no marker named (no offsets). Also: whether some marker named no source."""
    citations = CitationList(len(text))
    cited: set[int] = set()
    unresolved = False
    for marker in find_markers(text):
        source = sources.get(marker.number)
        if source is None:
            unresolved = True
            continue
        start, end = claim_span_before_marker(text, marker)
        citations.add(
            str(source["url"]),
            title=source.get("title"),
            start=start,
            end=end,
        )
        cited.add(marker.number)
    for index in sorted(set(sources) - cited):
        source = sources[index]
        citations.add(str(source["url"]), title=source.get("title"))
    return citations.items, unresolved


def _sources(results: list[dict[str, Any]], into: dict[int, dict[str, Any]]) -> None:
    for position, result in enumerate(results, start=1):
        index = result.get("index")
        into[index if isinstance(index, int) else position] = result


def _error_class(code: str | None, http_status: int | None) -> ErrorClass:
    by_code = dashscope_code_class(code)
    if by_code is not None:
        return by_code
    if http_status is not None and http_status >= 400:
        return status_error_class(http_status)
    return ErrorClass.UPSTREAM_FAILED


def _finish_error(reason: str) -> dict[str, Any]:
    return error_dict(ErrorClass.UPSTREAM_FAILED, f"answer ended with finish_reason {reason!r}")


@dataclass
class _StreamState:
    request_id: str | None = None
    texts: list[str] = field(default_factory=list)  # content of each frame, in order
    sources: dict[int, dict[str, Any]] = field(default_factory=dict)
    finish_reason: str | None = None
    error: dict[str, Any] | None = None
    bad_frames: int = 0

    def text(self) -> str:
        """Incremental frames are deltas; with `incremental_output: false` every frame repeats
        the text so far, which shows as each frame extending the one before."""
        frames = [t for t in self.texts if t]
        cumulative = len(frames) > 1 and all(
            later.startswith(earlier) and len(later) > len(earlier)
            for earlier, later in itertools.pairwise(frames)
        )
        return frames[-1] if cumulative else "".join(frames)


def _last_error_status(transcript: SseTranscript) -> int | None:
    status = None
    for comment in transcript.comments:
        match = _HTTP_STATUS.match(comment)
        if match and not match.group(1).startswith("2"):
            status = int(match.group(1))
    return status


def _read_stream(transcript: SseTranscript) -> _StreamState:
    state = _StreamState()
    for event, payload in json_frames(transcript.events, state):
        if isinstance(payload.get("request_id"), str) and payload["request_id"]:
            state.request_id = payload["request_id"]
        # The SDK treats any frame with a `code` as an error, whatever its event name.
        if event.event == "error" or payload.get("code"):
            code = payload.get("code")
            code = str(code) if code else None
            status = _last_error_status(transcript)
            state.error = error_dict(
                _error_class(code, status),
                str(payload.get("message") or "stream error"),
                code=code,
                http_status=status,
            )
            return state
        output = payload.get("output")
        if not isinstance(output, dict):
            continue
        text, reason = _choice(output)
        state.texts.append(text)
        _sources(_search_results(output), state.sources)
        if reason not in _NOT_FINISHED:
            state.finish_reason = str(reason)
            return state
    return state


class QwenConnector(DirectConnector):
    platform: ClassVar[str] = "qwen"
    default_base_url: ClassVar[str] = "https://dashscope.aliyuncs.com"
    body_name: ClassVar[str] = "a DashScope generation body"
    # `x-request-id` when sent, else the body's `request_id` (the same value).
    path: ClassVar[str] = PATH

    def capabilities(self) -> Capabilities:
        # The search takes no location; the Beijing endpoint searches the Chinese web.
        return self._capabilities(ALL_MODES, regions={"cn"})

    def request_body(self, request: SampleRequest) -> dict[str, Any]:
        parameters: dict[str, Any] = {"result_format": "message", "incremental_output": True}
        if request.mode != "no_search":
            parameters["enable_search"] = True
            parameters["search_options"] = {
                "enable_source": True,
                "enable_citation": True,
                "citation_format": CITATION_FORMAT,
            }
        if request.mode == "deep_thinking":
            parameters["enable_thinking"] = True  # hybrid models; thinking needs streaming
        return {
            "model": request.model or self.config.model,
            "input": {"messages": [{"role": "user", "content": request.question}]},
            "parameters": parameters,
        }

    def request_headers(self, request: SampleRequest) -> dict[str, str]:
        return self._bearer_headers({"X-DashScope-SSE": "enable"})

    # A 429 or 403 code can say more than the status: `Arrearage` is not cured by waiting.
    _http_error = staticmethod(auth_by_code(dashscope_code_class))

    @classmethod
    def _is_body(cls, payload: dict[str, Any]) -> bool:
        return isinstance(payload.get("output"), dict) or bool(payload.get("code"))

    @classmethod
    def _result(
        cls,
        raw: bytes,
        mime: str,
        sample_id: int | None,
        text: str,
        sources: dict[int, dict[str, Any]],
        request_id: str | None,
    ) -> NormalizedResult:
        citations, unresolved = _citations(text, sources)
        result = NormalizedResult.answer(
            raw, mime, sample_id, request_id, text, citations=citations, request_id=request_id
        )
        if unresolved:
            result.warnings.append("UNRESOLVED_CITATION_MARKER")
        return result

    @classmethod
    def _parse_stream(cls, raw: bytes, mime: str, sample_id: int | None) -> NormalizedResult:
        state = _read_stream(parse_sse(raw))
        result = cls._result(raw, mime, sample_id, state.text(), state.sources, state.request_id)
        if state.bad_frames:
            result.warnings.append("BAD_STREAM_FRAMES")
        if state.error is not None:
            result.fail(state.error)
        elif state.finish_reason is None:
            result.cut("stream ended without a frame with finish_reason 'stop'")
        elif state.finish_reason != "stop":
            result.fail(_finish_error(state.finish_reason))
        return result

    @classmethod
    def _parse_json(
        cls, payload: dict[str, Any], raw: bytes, mime: str, sample_id: int | None
    ) -> NormalizedResult:
        request_id = (
            payload.get("request_id") if isinstance(payload.get("request_id"), str) else None
        )
        output = _object(payload.get("output"))
        text, reason = _choice(output)
        sources: dict[int, dict[str, Any]] = {}
        _sources(_search_results(output), sources)
        result = cls._result(raw, mime, sample_id, text, sources, request_id)
        if payload.get("code"):
            code = str(payload["code"])
            result.fail(
                error_dict(_error_class(code, None), str(payload.get("message") or code), code=code)
            )
        elif reason != "stop":
            result.fail(_finish_error(str(reason)))
        return result
