"""Ollama's local chat API (docs/platforms.md §10).

`POST /api/chat`; no auth locally (a Bearer key, when sent, must not be `invalid…`, standing in
for ollama.com cloud models). `stream` defaults to true: NDJSON (`application/x-ndjson`), one
object per line, `message.content` pieces, then a line with `"done": true`, `done_reason`
and the durations in nanoseconds. `"stream": false` gives one `application/json` object.
`think: true` streams `message.thinking` pieces first. Errors are `{"error": "<string>"}`:
400 (missing model / messages), 401, 404 unknown path, 429 and 500/503 without Retry-After;
mid-stream a final `{"error": "..."}` line with the 200 already sent. No request id.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from ..faults import HTTP_FAULTS, STREAM_FAULTS, Draw
from ..protocol import PlatformProtocol, SimRequest, SimResponse, paced

PATH = "/api/chat"
DELTA_CHARS = 6
NDJSON_HEADERS = {"Content-Type": "application/x-ndjson"}


def _error(status: int, message: str) -> SimResponse:
    return SimResponse.json(status, {"error": message})


def _question(messages: list[Any]) -> str:
    return "\n".join(
        str(m.get("content", "")) for m in messages if isinstance(m, dict) and m.get("content")
    )


class OllamaProtocol(PlatformProtocol):
    name = "ollama"
    faults = HTTP_FAULTS | STREAM_FAULTS

    def rate_limited(self, draw: Draw) -> SimResponse:
        return _error(429, "too many requests, please try again later")

    def server_error(self, draw: Draw, *, overloaded: bool = False) -> SimResponse:
        status = int(draw.params.get("status", 503 if overloaded else 500))
        if status == 503:
            return _error(503, "server busy, please try again.  maximum pending requests exceeded")
        return _error(status, "llama runner process has terminated: exit status 2")

    def auth_error(self, draw: Draw) -> SimResponse:
        if int(draw.params.get("status", 401)) == 403:
            return _error(403, "remote model access is disabled")
        return _error(401, "unauthorized")

    def handle(self, request: SimRequest) -> SimResponse:
        if request.method != "POST" or request.path != PATH:
            return SimResponse(404, {"Content-Type": "text/plain"}, b"404 page not found")
        body = request.json()
        if not isinstance(body, dict):
            return _error(400, "invalid character 'x' looking for beginning of value")
        if not body.get("model"):
            return _error(400, "model is required")
        messages = body.get("messages")
        if not isinstance(messages, list):
            return _error(400, "messages is required")
        question = _question(messages)
        draw = self.sim.draw(self.name, question, self.faults)
        key = request.bearer()
        if request.headers.get("authorization") and (not key or key.startswith("invalid")):
            return self._finish(self.auth_error(draw), draw)
        if (failure := self.http_fault(draw)) is not None:
            return self._finish(failure, draw)
        answer = self.sim.answer_for(question, draw)
        answer.citations = []  # /api/chat has no search
        self.sim.record_answer(self.name, question, draw, answer, upstream_id=None)
        model = str(body["model"])
        created = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        thinking = bool(body.get("think"))
        final = {
            "model": model,
            "created_at": created,
            "message": {"role": "assistant", "content": ""},
            "done": True,
            "done_reason": "stop",
            "total_duration": 4883583458,
            "load_duration": 1334875,
            "prompt_eval_count": 26,
            "prompt_eval_duration": 342546000,
            "eval_count": len(answer.text) // 3 + 1,
            "eval_duration": 4535599000,
        }
        if body.get("stream", True) is False:
            if draw.fault == "midstream_error":
                return self._finish(
                    _error(500, "an error was encountered while running the model"), draw
                )
            message: dict[str, Any] = {"role": "assistant", "content": answer.text}
            if thinking:
                message["thinking"] = "The user compares providers; list the known ones."
            return self._finish(SimResponse.json(200, final | {"message": message}), draw)
        lines: list[dict[str, Any]] = []
        line = {"model": model, "created_at": created, "done": False}
        if thinking:
            for piece in ("The user compares ", "providers; list ", "the known ones."):
                lines.append(
                    line | {"message": {"role": "assistant", "content": "", "thinking": piece}}
                )
        for start in range(0, len(answer.text), DELTA_CHARS):
            piece = answer.text[start : start + DELTA_CHARS]
            lines.append(line | {"message": {"role": "assistant", "content": piece}})
        lines.append(final)
        encoded = [json.dumps(item, ensure_ascii=False) + "\n" for item in lines]
        stall = 0.0
        if draw.fault == "truncate":
            encoded = encoded[: draw.rng.randint(1, len(encoded) - 1)]
            if draw.params.get("cut_line", draw.rng.random() < 0.5):
                encoded.append(json.dumps(lines[len(encoded)], ensure_ascii=False)[:20])
            stall = float(draw.params.get("stall_seconds", 0.0))
        elif draw.fault == "midstream_error":
            encoded = encoded[: draw.rng.randint(1, len(encoded) - 1)]
            message_text = str(
                draw.params.get(
                    "message", "an error was encountered while running the model: unexpected EOF"
                )
            )
            encoded.append(json.dumps({"error": message_text}) + "\n")
        chunks = paced(draw, encoded, stall)
        return self._finish(SimResponse(200, dict(NDJSON_HEADERS), chunks=chunks), draw)

    @staticmethod
    def _finish(response: SimResponse, draw: Draw) -> SimResponse:
        response.delay_seconds = draw.latency_seconds
        return response
