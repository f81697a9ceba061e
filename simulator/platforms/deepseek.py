"""DeepSeek's classic OpenAI-compatible chat API (`POST /chat/completions`, also under `/v1`)
(docs/platforms.md §6).

No search and no citations. Thinking (`thinking: {"type": "enabled"}`, or a `*reasoner*` model
when `thinking` is absent) streams `reasoning_content` deltas before the `content` deltas.
Under load the server sends `: keep-alive` SSE comments before the first token (streams) or
blank lines before the JSON (non-streaming); the profile's `keepalives` (default 2) sets how
many. Request id: `x-ds-trace-id`. Errors: 400 Invalid Format, 401 Authentication Fails, 402
Insufficient Balance (`auth_error` with params `{"status": 402}`), 422 Invalid Parameters, 429
Rate Limit Reached (no retry hint), 500 Server Error, 503 Server Overloaded.
"""

from __future__ import annotations

from typing import Any

from ..faults import HTTP_FAULTS, STREAM_FAULTS, Draw
from ..protocol import PlatformProtocol, SimRequest, SimResponse
from . import chat_wire

PATHS = frozenset({"/chat/completions", "/v1/chat/completions"})
KEEPALIVE_FRAME = b": keep-alive\n\n"


def _error(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _masked(key: str | None) -> str:
    return "****" + (key or "")[-4:] if key and len(key) > 8 else "****"


def _thinking(body: dict[str, Any]) -> bool:
    thinking = body.get("thinking")
    if isinstance(thinking, dict):
        return thinking.get("type") == "enabled"
    return "reasoner" in str(body.get("model", ""))


def _reasoning(question: str) -> str:
    topic = question.strip()[:60]
    if any("\u4e00" <= ch <= "\u9fff" for ch in topic):
        return f"用户问的是“{topic}”。我需要比较几家厂商的价格、服务和稳定性，再给出建议。"
    return (
        f"The user asks: {topic}. I should compare the main vendors on pricing, support and "
        "reliability, then recommend comparing current plans."
    )


class DeepSeekProtocol(PlatformProtocol):
    name = "deepseek"
    faults = HTTP_FAULTS | STREAM_FAULTS

    def _headers(self, draw: Draw) -> dict[str, str]:
        return {"x-ds-trace-id": f"{draw.rng.getrandbits(128):032x}"}

    def rate_limited(self, draw: Draw) -> SimResponse:
        return SimResponse.json(429, _error("Rate Limit Reached", "rate_limit_error"))

    def server_error(self, draw: Draw, *, overloaded: bool = False) -> SimResponse:
        status = int(draw.params.get("status", 503 if overloaded else 500))
        message = "Server Overloaded" if status == 503 else "Server Error"
        return SimResponse.json(status, _error(message, "server_error"))

    def auth_error(self, draw: Draw, key: str | None = None) -> SimResponse:
        if int(draw.params.get("status", 401)) == 402:
            return SimResponse.json(402, _error("Insufficient Balance", "unknown_error"))
        message = f"Authentication Fails, Your api key: {_masked(key)} is invalid"
        return SimResponse.json(
            401, _error(message, "authentication_error", "invalid_request_error")
        )

    def handle(self, request: SimRequest) -> SimResponse:
        if request.method != "POST" or request.path not in PATHS:
            return SimResponse.json(404, _error("Not Found", "invalid_request_error"))
        body = request.json()
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return SimResponse.json(400, _error("Invalid Format", "invalid_request_error"))
        if not body.get("model") or any(
            isinstance(t, dict) and t.get("type") != "function" for t in body.get("tools") or []
        ):
            return SimResponse.json(422, _error("Invalid Parameters", "invalid_request_error"))
        question = chat_wire.question_of(body["messages"])
        draw = self.sim.draw(self.name, question, self.faults)
        headers = self._headers(draw)
        key = request.bearer()
        if not key or key.startswith("invalid") or draw.fault == "auth_error":
            return self._respond(self.auth_error(draw, key), headers, draw)
        if (failure := self.http_fault(draw)) is not None:
            return self._respond(failure, headers, draw)
        answer = self.sim.answer_for(question, draw)
        answer.citations = []  # the classic API has no search
        reasoning = _reasoning(question) if _thinking(body) else ""
        reply = chat_wire.ChatReply(
            id=f"{draw.rng.getrandbits(128):032x}",  # DeepSeek ids are bare UUID-like hex
            model=str(body["model"]),
            content=answer.text,
            reasoning=reasoning,
            usage=chat_wire.usage_for(question, answer.text, reasoning),
        )
        self.record(question, draw, answer, reply.id, headers["x-ds-trace-id"], reasoning=reasoning)
        keepalives = int(draw.params.get("keepalives", draw.profile.get("keepalives", 2)))
        if not body.get("stream"):
            if draw.fault in ("midstream_error", "truncate"):
                return self._respond(self.server_error(draw), headers, draw)
            padded: list[bytes | float] = [b"\n"] * keepalives
            padded.append(SimResponse.json(200, reply.body()).body)
            json_headers = {"Content-Type": "application/json"}
            return self._respond(SimResponse(200, json_headers, chunks=padded), headers, draw)
        options = body.get("stream_options")
        options = options if isinstance(options, dict) else {}
        chunks = self._stream(draw, reply, keepalives, bool(options.get("include_usage")))
        return self._respond(
            SimResponse(200, dict(chat_wire.SSE_HEADERS), chunks=chunks), headers, draw
        )

    def _stream(
        self, draw: Draw, reply: chat_wire.ChatReply, keepalives: int, include_usage: bool
    ) -> list[bytes | float]:
        payloads = [reply.chunk({"role": "assistant", "content": None, "reasoning_content": ""})]
        for piece in chat_wire.pieces(reply.reasoning):
            payloads.append(reply.chunk({"content": None, "reasoning_content": piece}))
        for piece in chat_wire.pieces(reply.content):
            payloads.append(reply.chunk({"content": piece, "reasoning_content": None}))
        payloads.append(reply.chunk({"content": ""}, finish_reason=reply.finish_reason))
        if include_usage:
            payloads.append(reply.usage_chunk())
        frames = [chat_wire.frame(p) for p in payloads] + [chat_wire.DONE_FRAME]
        # Keep-alives while the model has not started, and one more where thinking ends.
        think_end = 1 + len(chat_wire.pieces(reply.reasoning))
        if reply.reasoning:
            frames.insert(think_end, KEEPALIVE_FRAME)
        frames = [KEEPALIVE_FRAME] * keepalives + frames
        error = _error("Server Error", "server_error", str(draw.params.get("code", "server_error")))
        return chat_wire.streamed(draw, frames, first_text=keepalives + 1, error_payload=error)
