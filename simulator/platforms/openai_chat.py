"""OpenAI Chat Completions (`POST /v1/chat/completions`), streaming and not
(docs/platforms.md §2).

Search models (a model name containing "search") search on every request and answer with
`url_citation` annotations (character offsets into the content); other models reject
`web_search_options` with a 400. Streams are `data:` frames only: a role delta, content deltas
(each with an `obfuscation` field unless `stream_options.include_obfuscation` is false), one
annotation-only delta, the `finish_reason` chunk, the usage chunk when asked for, then
`data: [DONE]`. Errors, headers and retry hints are OpenAI's (§1), shared with the Responses
protocol.
"""

from __future__ import annotations

from typing import Any

from ..content import SimAnswer
from ..faults import Draw
from ..protocol import SimRequest, SimResponse
from . import chat_wire
from .openai_responses import OpenAIResponsesProtocol, _error, unknown_parameter, url_annotations

# POST /v1/chat/completions body fields (openai-python CompletionCreateParams).
CHAT_FIELDS = frozenset(
    {"audio", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs",
     "max_completion_tokens", "max_tokens", "messages", "metadata", "modalities", "model",
     "moderation", "n", "parallel_tool_calls", "prediction", "presence_penalty",
     "prompt_cache_key", "prompt_cache_options", "prompt_cache_retention", "reasoning_effort",
     "response_format", "safety_identifier", "seed", "service_tier", "stop", "store", "stream",
     "stream_options", "temperature", "tool_choice", "tools", "top_logprobs", "top_p", "user",
     "verbosity", "web_search_options"}
)  # fmt: skip


def _annotations(answer: SimAnswer) -> list[dict[str, Any]]:
    """The Responses API's annotations, nested under their type as Chat Completions sends."""
    nested = []
    for annotation in url_annotations(answer):
        kind = annotation.pop("type")
        nested.append({"type": kind, kind: annotation})
    return nested


class OpenAIChatProtocol(OpenAIResponsesProtocol):
    name = "openai_chat"

    def handle(self, request: SimRequest) -> SimResponse:
        if request.method != "POST" or request.path != "/v1/chat/completions":
            return SimResponse.json(404, _error("Not found", "invalid_request_error", None))
        body = request.json()
        if not isinstance(body, dict) or not body.get("model") or not body.get("messages"):
            message = "Missing required parameter: 'model' or 'messages'."
            return SimResponse.json(400, _error(message, "invalid_request_error", None))
        if (refused := unknown_parameter(body, CHAT_FIELDS)) is not None:
            return refused
        search = "search" in str(body["model"]).lower()
        if "web_search_options" in body and not search:
            message = "web_search_options is only supported with search models."
            return SimResponse.json(400, _error(message, "invalid_request_error", None))
        question = chat_wire.question_of(body["messages"])
        draw = self.sim.draw(self.name, question, self.faults)
        headers = self._headers(draw)
        if (refused := self.refused(request.bearer(), headers, draw)) is not None:
            return refused
        answer = self.sim.answer_for(question, draw)
        if not search:
            answer.citations = []
        reply = chat_wire.ChatReply(
            id=f"chatcmpl-{draw.rng.getrandbits(96):024x}",
            model=str(body["model"]),
            content=answer.text,
            annotations=_annotations(answer),
            usage=chat_wire.usage_for(question, answer.text),
        )
        self.record(question, draw, answer, reply.id, headers["x-request-id"])
        if not body.get("stream"):
            if draw.fault in ("midstream_error", "truncate"):
                return self._respond(self.server_error(draw), headers, draw)
            return self._respond(SimResponse.json(200, reply.body()), headers, draw)
        options = body.get("stream_options")
        options = options if isinstance(options, dict) else {}
        chunks = self._chat_stream(draw, reply, options)
        return self._respond(
            SimResponse(200, dict(chat_wire.SSE_HEADERS), chunks=chunks), headers, draw
        )

    def _chat_stream(
        self, draw: Draw, reply: chat_wire.ChatReply, options: dict[str, Any]
    ) -> list[bytes | float]:
        obfuscate = options.get("include_obfuscation", True)
        payloads = [reply.chunk({"role": "assistant", "content": "", "refusal": None})]
        for piece in chat_wire.pieces(reply.content):
            extra = {"obfuscation": f"{draw.rng.getrandbits(32):08x}"} if obfuscate else {}
            payloads.append(reply.chunk({"content": piece}) | extra)
        if reply.annotations:  # the late, annotation-only delta: no `content` at all
            payloads.append(reply.chunk({"annotations": reply.annotations}))
        payloads.append(reply.chunk({}, finish_reason=reply.finish_reason))
        if options.get("include_usage"):
            payloads.append(reply.usage_chunk())
        frames = [chat_wire.frame(p) for p in payloads] + [chat_wire.DONE_FRAME]
        code = str(draw.params.get("code", "server_error"))
        error = _error("The model failed to generate a response.", "server_error", code)
        return chat_wire.streamed(draw, frames, first_text=1, error_payload=error)
