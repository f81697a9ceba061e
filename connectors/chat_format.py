"""Reading the OpenAI Chat Completions wire format, which many vendors speak.

OpenAI Chat, DeepSeek, Kimi and every "OpenAI-compatible" endpoint answer with the same shapes:
a `chat.completion` JSON body, or an SSE stream of `chat.completion.chunk` frames (`data:` only,
no `event:`) ending in `data: [DONE]`. This module turns either into one `ChatCompletion` and
decides, by one set of rules, whether it is a complete answer. It builds no requests: each
adapter keeps its own request code and its own reading of vendor extras (annotations,
`reasoning_content`, tool calls).

Rules (docs/platforms.md §2, §6, §7, §11):
- a stream is complete only on `data: [DONE]`; without it the answer is truncated;
- `data: {"error": ...}` after the 200 is a mid-stream error;
- SSE comments (`: keep-alive`), `obfuscation` fields and the usage-only chunk carry no text;
- `finish_reason` "length" / "content_filter" mean the upstream cut the answer itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import safejson
from .base import ErrorClass, NormalizedResult
from .errors import classify_error_code, error_dict
from .streams import SSE_MIME as SSE_MIME
from .streams import SseTranscript, is_sse, parse_sse

JSON_MIME = "application/json"
DONE = "[DONE]"
# finish_reason values that mean the text is not the whole answer.
CUT_FINISH_REASONS = frozenset({"length", "content_filter"})


@dataclass
class ToolCall:
    index: int
    id: str | None = None
    type: str | None = None
    name: str = ""
    arguments: str = ""  # a JSON string, exactly as the upstream sent it (deltas joined)

    def to_message(self) -> dict[str, Any]:
        """The tool call as it goes back in the assistant message of the next request."""
        return {
            "id": self.id,
            "type": self.type or "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass
class ChatCompletion:
    """What one Chat Completions response said, streamed or not (choice 0 only)."""

    streamed: bool
    id: str | None = None
    model: str | None = None
    content: str = ""
    reasoning: str = ""  # DeepSeek / Kimi `reasoning_content`
    annotations: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    done: bool = False  # stream: `data: [DONE]` seen; JSON: a chat.completion body
    error: dict[str, Any] | None = None  # the upstream's own error object
    bad_frames: int = 0
    keepalives: int = 0
    after_done: int = 0  # frames after [DONE] (ignored)

    def tool_call(self, index: int) -> ToolCall:
        for call in self.tool_calls:
            if call.index == index:
                return call
        call = ToolCall(index=index)
        self.tool_calls.append(call)
        return call


def _apply_tool_call_delta(completion: ChatCompletion, delta: dict[str, Any]) -> None:
    index = delta.get("index")
    call = completion.tool_call(index if isinstance(index, int) else len(completion.tool_calls))
    if delta.get("id"):
        call.id = str(delta["id"])
    if delta.get("type"):
        call.type = str(delta["type"])
    function = delta.get("function")
    if isinstance(function, dict):
        if function.get("name"):
            call.name = str(function["name"])
        if isinstance(function.get("arguments"), str):
            call.arguments += function["arguments"]


def _apply_message(completion: ChatCompletion, message: dict[str, Any]) -> None:
    """A delta (stream) or a whole message (JSON): text is appended, lists are extended."""
    if isinstance(message.get("content"), str):
        completion.content += message["content"]
    if isinstance(message.get("reasoning_content"), str):
        completion.reasoning += message["reasoning_content"]
    annotations = message.get("annotations")
    if isinstance(annotations, list):
        completion.annotations += [a for a in annotations if isinstance(a, dict)]
    tool_calls = message.get("tool_calls")
    if isinstance(tool_calls, list):
        for position, delta in enumerate(tool_calls):
            if isinstance(delta, dict):
                _apply_tool_call_delta(completion, {"index": position} | delta)


def _first_choice(payload: dict[str, Any]) -> dict[str, Any] | None:
    choices = payload.get("choices")
    if not isinstance(choices, list):
        return None
    for choice in choices:
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            return choice
    return None


def _error_object(payload: dict[str, Any]) -> dict[str, Any] | None:
    error = payload.get("error")
    if isinstance(error, dict):
        return error
    if isinstance(error, str) and error:
        return {"message": error}
    return None


def _apply_chunk(completion: ChatCompletion, payload: dict[str, Any]) -> None:
    if payload.get("id") and completion.id is None:
        completion.id = str(payload["id"])
    if payload.get("model") and completion.model is None:
        completion.model = str(payload["model"])
    if isinstance(payload.get("usage"), dict):
        completion.usage = payload["usage"]
    choice = _first_choice(payload)
    if choice is None:
        return
    delta = choice.get("delta")
    if isinstance(delta, dict):
        _apply_message(completion, delta)
    if choice.get("finish_reason"):
        completion.finish_reason = str(choice["finish_reason"])


def read_stream(transcript: SseTranscript) -> ChatCompletion:
    completion = ChatCompletion(streamed=True, keepalives=len(transcript.comments))
    events = list(transcript.events)
    # A final `data: [DONE]` without its blank line still says everything it has to say.
    if transcript.unterminated is not None and transcript.unterminated.data.strip() == DONE:
        events.append(transcript.unterminated)
    for event in events:
        if completion.done or completion.error is not None:
            completion.after_done += 1
            continue
        if event.data.strip() == DONE:
            completion.done = True
            continue
        payload = event.json_object()
        if payload is None:
            completion.bad_frames += 1
            continue
        completion.error = _error_object(payload)
        if completion.error is None:
            _apply_chunk(completion, payload)
    return completion


def read_json(payload: dict[str, Any]) -> ChatCompletion:
    completion = ChatCompletion(streamed=False)
    completion.error = _error_object(payload)
    if completion.error is not None:
        return completion
    completion.id = str(payload["id"]) if payload.get("id") else None
    completion.model = str(payload["model"]) if payload.get("model") else None
    completion.usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else None
    choice = _first_choice(payload)
    if choice is None:
        return completion
    completion.done = True
    if isinstance(choice.get("message"), dict):
        _apply_message(completion, choice["message"])
    if choice.get("finish_reason"):
        completion.finish_reason = str(choice["finish_reason"])
    return completion


def read_body(raw: bytes, content_type: str = "") -> ChatCompletion | None:
    """The response as a ChatCompletion; None when it is neither a chat SSE stream nor a JSON
    object (a login page, a proxy's error page)."""
    if is_sse(raw, content_type):
        return read_stream(parse_sse(raw))
    try:
        # DeepSeek pads slow non-streaming answers with blank lines; JSON allows whitespace.
        payload = safejson.loads(raw)
    except (UnicodeDecodeError, ValueError):
        return None
    return read_json(payload) if isinstance(payload, dict) else None


def stream_error(
    error: dict[str, Any], classify: Callable[[str | None], ErrorClass] = classify_error_code
) -> dict[str, Any]:
    """An upstream error object as the NormalizedResult error (class from code or type)."""
    code = error.get("code") or error.get("type")
    code = str(code) if code else None
    message = str(error.get("message") or "upstream error")
    return error_dict(classify(code), message, code=code)


def outcome_problem(
    completion: ChatCompletion,
    *,
    allow_tool_calls: bool = False,
    classify: Callable[[str | None], ErrorClass] = classify_error_code,
) -> tuple[str, dict[str, Any] | None]:
    """(collection_state, error) by the rules above: "completed", "failed" or "truncated"."""
    if completion.error is not None:
        return "failed", stream_error(completion.error, classify)
    if not completion.done and completion.streamed:
        return "truncated", error_dict(ErrorClass.TRUNCATED, "response ended without data: [DONE]")
    if not completion.done:  # JSON, but not a chat.completion: keep it for review
        return "failed", error_dict(ErrorClass.PARSE_FAILED, "JSON body has no choices")
    reason = completion.finish_reason
    if reason in CUT_FINISH_REASONS:
        return "failed", error_dict(
            ErrorClass.UPSTREAM_FAILED, f"upstream cut the answer (finish_reason {reason})"
        )
    if reason in ("tool_calls", "function_call") and not allow_tool_calls:
        return "failed", error_dict(
            ErrorClass.UPSTREAM_FAILED, f"unexpected finish_reason {reason}: no tools were offered"
        )
    return "completed", None


def base_result(
    completion: ChatCompletion,
    *,
    raw: bytes,
    mime: str,
    sample_id: int | None,
    allow_tool_calls: bool = False,
    classify: Callable[[str | None], ErrorClass] = classify_error_code,
) -> NormalizedResult:
    """The NormalizedResult of a completion, without citations (the adapter adds its own)."""
    state, error = outcome_problem(completion, allow_tool_calls=allow_tool_calls, classify=classify)
    evidence = {"completed": "stored", "truncated": "partial"}.get(state, "failed")
    result = NormalizedResult(
        sample_id=sample_id,
        upstream_id=completion.id,
        collection_state=state,
        evidence_state=evidence,
        answer_text=completion.content,
        raw=raw,
        raw_mime=mime,
        error=error,
    )
    if completion.bad_frames:
        result.warnings.append("BAD_STREAM_FRAMES")
    if state == "completed" and completion.finish_reason is None:
        result.warnings.append("NO_FINISH_REASON")
    return result
