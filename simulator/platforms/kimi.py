"""Moonshot Kimi (`POST /v1/chat/completions`) with the `$web_search` builtin function
(docs/platforms.md §7).

A request declaring `{"type": "builtin_function", "function": {"name": "$web_search"}}` gets
`finish_reason: "tool_calls"` with one `$web_search` call whose `arguments` is
`{"search_result": {"search_id": ...}, "usage": {"total_tokens": n}}`, until it has echoed
`search_rounds` of them (profile or script params, default 1); then the answer. The echo is
checked: every `tool` message must carry exactly the `arguments` issued for its
`tool_call_id`, or the request is a 400. Thinking must be disabled while `$web_search` is
declared (400 otherwise). Each round streams and ends with `data: [DONE]`.

The answer has no structured citations; like Kimi, it ends with the sources it used written as
Markdown links. Randomness: round 1 draws on the question, round n on "<question> [round n]", so
a script can target a later round (`{"match": "[round 2]", ...}`).

Headers: `Msh-Request-Id`, `x-msh-trace-id`, `X-RateLimit-*`. Errors `{"error": {"type",
"message"}}`: 401 `invalid_authentication_error`; 429 `rate_limit_reached_error` with
`Retry-After` (or `exceeded_current_quota_error`, params `{"quota": true}`); 429
`engine_overloaded_error` for `overloaded`; 500 `server_error`.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ..content import SimAnswer, is_cjk
from ..faults import HTTP_FAULTS, STREAM_FAULTS, Draw
from ..protocol import PlatformProtocol, SimRequest, SimResponse
from . import chat_wire

WEB_SEARCH = "$web_search"
MAX_ISSUED = 10_000


def _error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind}}


def _declares_web_search(tools: Any) -> bool:
    return any(
        isinstance(t, dict)
        and t.get("type") == "builtin_function"
        and isinstance(t.get("function"), dict)
        and t["function"].get("name") == WEB_SEARCH
        for t in (tools if isinstance(tools, list) else [])
    )


def _with_sources(answer: SimAnswer) -> str:
    """The answer followed by the sources Kimi says it used, as Markdown links."""
    seen: list[str] = []
    lines: list[str] = []
    for citation in answer.citations:
        if citation.url in seen:
            continue
        seen.append(citation.url)
        lines.append(f"{len(lines) + 1}. [{citation.title}]({citation.url})")
    if not lines:
        return answer.text
    heading = "参考来源：" if is_cjk(answer.text) else "Sources:"
    return answer.text + "\n\n" + heading + "\n" + "\n".join(lines)


class KimiProtocol(PlatformProtocol):
    name = "kimi"
    faults = HTTP_FAULTS | STREAM_FAULTS

    def __init__(self, sim: Any) -> None:
        super().__init__(sim)
        self.issued: dict[str, str] = {}  # tool_call_id -> arguments, for the echo check

    def reset(self) -> None:
        with self.sim.lock:
            self.issued.clear()

    def _headers(self, draw: Draw) -> dict[str, str]:
        return {
            "Msh-Request-Id": f"{draw.rng.getrandbits(96):024x}",
            "x-msh-trace-id": f"{draw.rng.getrandbits(64):016x}",
            "X-RateLimit-Limit": "200",
            "X-RateLimit-Remaining": "199",
            "X-RateLimit-Reset": "1",
        }

    def rate_limited(self, draw: Draw) -> SimResponse:
        if draw.params.get("quota"):
            message = "Your account is suspended due to insufficient balance, please recharge"
            return SimResponse.json(429, _error(message, "exceeded_current_quota_error"))
        seconds = float(draw.params.get("retry_after_seconds", draw.profile["retry_after_seconds"]))
        message = (
            "Your account request reached organization max RPM: 3, please try again after "
            f"{math.ceil(seconds)} seconds"
        )
        return SimResponse.json(
            429,
            _error(message, "rate_limit_reached_error"),
            {"Retry-After": str(math.ceil(seconds))},
        )

    def server_error(self, draw: Draw, *, overloaded: bool = False) -> SimResponse:
        if overloaded:
            message = "The engine is currently overloaded, please try again later"
            return SimResponse.json(429, _error(message, "engine_overloaded_error"))
        status = int(draw.params.get("status", 500))
        return SimResponse.json(status, _error("Internal server error", "server_error"))

    def auth_error(self, draw: Draw) -> SimResponse:
        return SimResponse.json(
            401, _error("Invalid Authentication", "invalid_authentication_error")
        )

    def _searches_echoed(self, messages: list[Any]) -> tuple[int, str | None]:
        """How many `$web_search` calls the conversation echoed back, or why the echo is wrong."""
        echoed = 0
        for message in messages:
            if not isinstance(message, dict) or message.get("role") != "tool":
                continue
            with self.sim.lock:
                issued = self.issued.get(str(message.get("tool_call_id")))
            if issued is None:
                return echoed, f"unknown tool_call_id {message.get('tool_call_id')!r}"
            if message.get("content") != issued:
                return echoed, "tool message content must be the tool call's arguments, unchanged"
            echoed += 1
        return echoed, None

    def handle(self, request: SimRequest) -> SimResponse:
        if request.method != "POST" or request.path != "/v1/chat/completions":
            return SimResponse.json(404, _error("Not found", "resource_not_found_error"))
        body = request.json()
        if not isinstance(body, dict) or not body.get("model") or not body.get("messages"):
            message = "Invalid request: model and messages are required"
            return SimResponse.json(400, _error(message, "invalid_request_error"))
        messages = body["messages"] if isinstance(body["messages"], list) else []
        search = _declares_web_search(body.get("tools"))
        thinking = body.get("thinking")
        if search and isinstance(thinking, dict) and thinking.get("type") == "enabled":
            message = "thinking must be disabled when using the $web_search builtin function"
            return SimResponse.json(400, _error(message, "invalid_request_error"))
        echoed, problem = self._searches_echoed(messages)
        if problem is not None:
            return SimResponse.json(400, _error(problem, "invalid_request_error"))
        question = chat_wire.question_of(messages)
        round_no = echoed + 1
        text = question if round_no == 1 else f"{question} [round {round_no}]"
        draw = self.sim.draw(self.name, text, self.faults)
        headers = self._headers(draw)
        if (refused := self.refused(request.bearer(), headers, draw)) is not None:
            return refused
        rounds = int(draw.params.get("search_rounds", draw.profile.get("search_rounds", 1)))
        if search and echoed < rounds:
            reply = self._search_call(draw, str(body["model"]), question)
        else:
            reply = self._answer(draw, str(body["model"]), question, search, headers, round_no)
        if not body.get("stream"):
            if draw.fault in ("midstream_error", "truncate"):
                return self._respond(self.server_error(draw), headers, draw)
            return self._respond(SimResponse.json(200, reply.body()), headers, draw)
        return self._respond(
            SimResponse(200, dict(chat_wire.SSE_HEADERS), chunks=self._stream(draw, reply)),
            headers,
            draw,
        )

    def _search_call(self, draw: Draw, model: str, question: str) -> chat_wire.ChatReply:
        call_id = f"{WEB_SEARCH}:{draw.rng.getrandbits(48):012x}"
        tokens = 4000 + draw.rng.randint(0, 4000)
        arguments = json.dumps(
            {"search_result": {"search_id": f"{draw.rng.getrandbits(96):024x}"},
             "usage": {"total_tokens": tokens}},
            ensure_ascii=False,
        )  # fmt: skip
        with self.sim.lock:
            self.issued[call_id] = arguments
            while len(self.issued) > MAX_ISSUED:
                self.issued.pop(next(iter(self.issued)))
        call = {
            "index": 0,
            "id": call_id,
            "type": "builtin_function",
            "function": {"name": WEB_SEARCH, "arguments": arguments},
        }
        return chat_wire.ChatReply(
            id=f"chatcmpl-{draw.rng.getrandbits(96):024x}",
            model=model,
            tool_calls=[call],
            finish_reason="tool_calls",
            usage=chat_wire.usage_for(question, ""),
        )

    def _answer(
        self,
        draw: Draw,
        model: str,
        question: str,
        search: bool,
        headers: dict[str, str],
        round_no: int,
    ) -> chat_wire.ChatReply:
        answer = self.sim.answer_for(question, draw)
        if not search:
            answer.citations = []
        text = _with_sources(answer)
        reply = chat_wire.ChatReply(
            id=f"chatcmpl-{draw.rng.getrandbits(96):024x}",
            model=model,
            content=text,
            usage=chat_wire.usage_for(question, text),
        )
        self.record(
            question,
            draw,
            answer,
            reply.id,
            headers["Msh-Request-Id"],
            answer_text=text,
            rounds=round_no,
        )
        return reply

    def _stream(self, draw: Draw, reply: chat_wire.ChatReply) -> list[bytes | float]:
        payloads = [reply.chunk({"role": "assistant", "content": ""})]
        for call in reply.tool_calls:
            # The call arrives in two deltas: id, type and name first, then the arguments.
            arguments = call["function"]["arguments"]
            half = len(arguments) // 2
            head = {
                "index": call["index"],
                "id": call["id"],
                "type": call["type"],
                "function": {"name": call["function"]["name"], "arguments": arguments[:half]},
            }
            tail = {"index": call["index"], "function": {"arguments": arguments[half:]}}
            payloads += [reply.chunk({"tool_calls": [head]}), reply.chunk({"tool_calls": [tail]})]
        for piece in chat_wire.pieces(reply.content):
            payloads.append(reply.chunk({"content": piece}))
        # Kimi reports usage inside the last choice rather than in a separate chunk.
        payloads.append(
            reply.chunk({}, finish_reason=reply.finish_reason, usage=reply.usage)
        )  # fmt: skip
        frames = [chat_wire.frame(p) for p in payloads] + [chat_wire.DONE_FRAME]
        error = _error("Internal server error", str(draw.params.get("code", "server_error")))
        return chat_wire.streamed(draw, frames, first_text=1, error_payload=error)
