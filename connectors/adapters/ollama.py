"""Ollama's local chat API (docs/platforms.md §10).

`POST /api/chat`, streamed as NDJSON (`application/x-ndjson`): one JSON object per line with a
`message.content` piece; complete only on a line with `"done": true` (`done_reason` `stop`;
`length` means the answer was cut by the token limit). A line `{"error": "..."}` after the 200
fails the stream. `"stream": false` gives one `application/json` object with `done: true`.

No search, no citations, no request id, no retry hint. No auth locally; a Bearer key is sent
only when one is configured (ollama.com cloud models). `think: true` asks thinking models to
reason first (`message.thinking`, not part of the answer); whether the configured model can
think is configuration (`extra["thinking"]`), so `deep_thinking` is offered only then.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..base import (
    Capabilities,
    ErrorClass,
    NormalizedResult,
    SampleRequest,
    UpstreamError,
)
from ..direct import DirectConnector, unparseable
from ..errors import MAX_MESSAGE_CHARS, classify_http_error, error_dict, json_body
from ..streams import parse_ndjson

PATH = "/api/chat"
NDJSON_MIME = "application/x-ndjson"
_KEYS = frozenset({"message", "done", "error"})  # at least one on every Ollama line


@dataclass
class _Lines:
    text: str = ""
    done: bool = False
    done_reason: str | None = None
    error: str | None = None
    model: str | None = None


def _read(objects: list[Any]) -> tuple[_Lines, int]:
    """What the lines said, up to the first `done` or `error` line; and how many were not
    objects."""
    lines = _Lines()
    bad = 0
    for item in objects:
        if not isinstance(item, dict):
            bad += 1
            continue
        if "error" in item:
            lines.error = str(item["error"] or "stream error")
            break
        message = item.get("message")
        if isinstance(message, dict):
            lines.text += str(message.get("content") or "")
        if isinstance(item.get("model"), str):
            lines.model = item["model"]
        if item.get("done") is True:
            lines.done = True
            reason = item.get("done_reason")
            lines.done_reason = str(reason) if reason else None
            break
    return lines, bad


class OllamaConnector(DirectConnector):
    platform: ClassVar[str] = "ollama"
    default_base_url: ClassVar[str] = "http://localhost:11434"
    path: ClassVar[str] = PATH
    # Ollama has no response or request id: the key names the attempt.
    request_id_header: ClassVar[bool] = False

    def capabilities(self) -> Capabilities:
        modes = {"no_search"} | ({"deep_thinking"} if self.config.extra.get("thinking") else set())
        # The answer does not depend on the region; any target region runs the same local model.
        limit = int(self.config.extra.get("submission_limit", 10))
        return self._capabilities(modes, submission_limit=limit)

    def request_body(self, request: SampleRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": request.model or self.config.model,
            "messages": [{"role": "user", "content": request.question}],
            "stream": True,
        }
        if request.mode == "deep_thinking":
            body["think"] = True
        return body

    def request_headers(self, request: SampleRequest) -> dict[str, str]:
        headers = {"Accept": NDJSON_MIME}
        if self.config.api_key:
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        return headers

    @staticmethod
    def _http_error(
        status: int, headers: dict[str, str], body: bytes, egress: str
    ) -> UpstreamError:
        error = classify_http_error(status, headers, body, egress=egress)
        payload = json_body(body)
        # Ollama's error is a plain string: {"error": "model 'x' not found"}.
        if isinstance(payload, dict) and isinstance(payload.get("error"), str):
            error.message = payload["error"][:MAX_MESSAGE_CHARS]
            error.args = (error.message,)
        return error

    @classmethod
    def parse(
        cls, raw: bytes, *, content_type: str = "", sample_id: int | None = None
    ) -> NormalizedResult:
        mime = content_type or NDJSON_MIME
        payload = json_body(raw) if content_type.startswith("application/json") else None
        if isinstance(payload, dict):  # the non-streamed body (may span lines when pretty)
            objects: list[Any] = [payload]
            ends_with_newline, invalid = True, 0
        else:
            transcript = parse_ndjson(raw)
            objects = transcript.objects
            ends_with_newline = transcript.ends_with_newline
            invalid = len(transcript.invalid_lines)
        if not any(isinstance(o, dict) and _KEYS & o.keys() for o in objects):
            return unparseable(raw, content_type, sample_id, "an Ollama chat body")
        lines, bad = _read(objects)
        result = NormalizedResult.answer(raw, mime, sample_id, None, lines.text)
        if bad or invalid:
            result.warnings.append("BAD_STREAM_FRAMES")
        if lines.error is not None:
            # A bare string: nothing says whether asking again would help.
            result.fail(error_dict(ErrorClass.UPSTREAM_FAILED, lines.error))
        elif not lines.done:
            cut = "" if ends_with_newline else " (last line cut)"
            result.cut(f'stream ended without a "done": true line{cut}')
        elif lines.done_reason not in (None, "stop"):
            result.fail(
                error_dict(
                    ErrorClass.UPSTREAM_FAILED,
                    f"answer ended with done_reason {lines.done_reason!r}",
                )
            )
        return result
