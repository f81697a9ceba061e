"""Perplexity Sonar `POST /chat/completions` (docs/platforms.md §5). Search is always on.

Requests need `Authorization: Bearer`, a Sonar `model` and `messages`; `disable_search: true`
answers without sources. Answers carry inline `[n]` markers, 1-based into the top-level
`search_results[]` (url, title, date, snippet) and the legacy `citations[]` URL list; one
search result is never cited, as happens on the real API. Markers sit either before the
sentence's final punctuation (`...setup[1].`) or after it (`...setup.[1]`), chosen per answer,
so the intended span is the claim before the marker. Reasoning models (`*reasoning*`,
`*deep-research*`) start the content with a `<think>…</think>` section.

Streams are data-only SSE frames (CRLF line ends) in "full" mode: each `chat.completion.chunk`
carries `delta` and the cumulative `message`, `search_results`/`citations` repeat, the last
chunk has `finish_reason: "stop"` and `usage`, then `data: [DONE]`. Faults: 429 without any
retry hint (none is documented; `params.retry_after_header` adds a `Retry-After`), 500/503,
401, hang, login/error pages with 200, truncated streams (no `finish_reason` chunk, no
`[DONE]`) and `event: error` mid-stream. No request id header is sent.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from ..content import UNCITED_SOURCE, SimAnswer, SimCitation
from ..faults import HTTP_FAULTS, STREAM_FAULTS, Draw
from ..protocol import PlatformProtocol, SimRequest, SimResponse, paced, user_text

MODELS = frozenset({"sonar", "sonar-pro", "sonar-reasoning-pro", "sonar-deep-research"})
DELTA_CHARS = 15
THINKING = "<think>\nThe user asks for a comparison; I will weigh the sources.\n</think>\n\n"
UNCITED_RESULT = {
    "title": UNCITED_SOURCE[1],
    "url": UNCITED_SOURCE[0],
    "date": "2025-03-01",
    "last_updated": "2025-06-30",
    "snippet": "Cloud computing is the on-demand availability of computer system resources.",
    "source": "web",
}


def _error(status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> Any:
    return SimResponse.json(
        status, {"error": {"message": message, "type": kind, "code": status}}, headers
    )


def _marked(answer: SimAnswer, urls: list[str], after_punctuation: bool) -> SimAnswer:
    """The answer with `[n]` markers inserted, and each citation's span the claim before it."""
    text = answer.text
    out = ""
    position = 0
    citations: list[SimCitation] = []
    for citation in sorted(answer.citations, key=lambda c: c.start):
        marker = f"[{urls.index(citation.url) + 1}]"
        end = citation.end
        if not after_punctuation and text[end - 1 : end] in (".", "。", "!", "?"):
            end -= 1  # `claim[1].`
        out += text[position : citation.start]
        start = len(out)
        out += text[citation.start : end]
        claim_end = len(out)
        out += marker
        position = end
        citations.append(
            SimCitation(citation.url, citation.title, start, claim_end, out[start:claim_end],
                        citation.brand)
        )  # fmt: skip
    out += text[position:]
    return SimAnswer(out, citations, list(answer.mentioned), answer.language)


class PerplexityProtocol(PlatformProtocol):
    name = "perplexity"
    faults = HTTP_FAULTS | STREAM_FAULTS

    def rate_limited(self, draw: Draw) -> SimResponse:
        headers = {}
        if "retry_after_header" in draw.params:
            headers["Retry-After"] = str(draw.params["retry_after_header"])
        message = "Rate limit exceeded. Please slow down your requests."
        return _error(429, "rate_limit_exceeded", message, headers)

    def server_error(self, draw: Draw, *, overloaded: bool = False) -> SimResponse:
        status = int(draw.params.get("status", 503 if overloaded else 500))
        if status == 503:
            return _error(503, "service_unavailable", "Service temporarily unavailable")
        return _error(status, "internal_server_error", "Internal server error")

    def auth_error(self, draw: Draw) -> SimResponse:
        status = int(draw.params.get("status", 401))
        if status == 403:
            return _error(403, "forbidden", "You do not have access to this resource.")
        return _error(401, "invalid_api_key", "Invalid API key provided.")

    def handle(self, request: SimRequest) -> SimResponse:
        if request.method != "POST" or request.path != "/chat/completions":
            return _error(404, "not_found", "Not Found")
        key = request.bearer()
        if not key:
            return _error(401, "invalid_api_key", "Missing API key.")
        body = request.json()
        if not isinstance(body, dict):
            return _error(400, "bad_request", "Request body must be a JSON object.")
        model = body.get("model")
        if model not in MODELS:
            message = (
                f"Invalid model '{model}'. Permitted models can be found in the documentation "
                "at https://docs.perplexity.ai/guides/model-cards."
            )
            return _error(400, "invalid_model", message)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error(400, "bad_request", "messages: field required")
        question = user_text(messages, last=True)
        draw = self.sim.draw(self.name, question, self.faults)
        if key.startswith("invalid"):
            return self._finish(self.auth_error(draw), draw)
        stream = bool(body.get("stream"))
        if draw.fault == "midstream_error" and not stream:
            return self._finish(self.server_error(draw), draw)
        if (failure := self.http_fault(draw)) is not None:
            return self._finish(failure, draw)

        answer = self.sim.answer_for(question, draw)
        results: list[dict[str, Any]] = []
        if body.get("disable_search"):
            answer.citations = []
        else:
            urls = list(dict.fromkeys(c.url for c in answer.citations))
            titles = {c.url: c.title for c in answer.citations}
            answer = _marked(answer, urls, after_punctuation=draw.rng.random() < 0.5)
            results = [
                {"title": titles[url], "url": url, "date": "2025-05-12",
                 "last_updated": "2025-07-01", "snippet": f"{titles[url]}: pricing and features.",
                 "source": "web"}
                for url in urls
            ] + [UNCITED_RESULT]  # fmt: skip
        reasoning = "reasoning" in str(model) or "deep-research" in str(model)
        content = (THINKING if reasoning else "") + answer.text
        completion_id = str(uuid.UUID(int=draw.rng.getrandbits(128), version=4))
        self.sim.record_answer(self.name, question, draw, answer, upstream_id=completion_id)
        common = {
            "id": completion_id,
            "model": model,
            "created": int(time.time()),
            "citations": [r["url"] for r in results],
            "search_results": results,
        }
        usage = self._usage(content, bool(results))
        if not stream:
            reply = {"role": "assistant", "content": content}
            payload = common | {
                "object": "chat.completion",
                "choices": [{"index": 0, "finish_reason": "stop", "message": reply}],
                "usage": usage,
            }
            return self._finish(SimResponse.json(200, payload), draw)
        return self._finish(self._stream(draw, content, common, usage), draw)

    @staticmethod
    def _finish(response: SimResponse, draw: Draw) -> SimResponse:
        response.delay_seconds = draw.latency_seconds
        return response

    @staticmethod
    def _usage(content: str, searched: bool) -> dict[str, Any]:
        tokens = len(content) // 4 + 1
        return {
            "prompt_tokens": 12,
            "completion_tokens": tokens,
            "total_tokens": 12 + tokens,
            "search_context_size": "low",
            "citation_tokens": 300 if searched else 0,
            "num_search_queries": 1 if searched else 0,
            "cost": {"input_tokens_cost": 0.0, "output_tokens_cost": 0.0002,
                     "request_cost": 0.005, "total_cost": 0.0052},
        }  # fmt: skip

    def _stream(
        self, draw: Draw, content: str, common: dict[str, Any], usage: dict[str, Any]
    ) -> SimResponse:
        frames: list[str] = []
        sent = ""
        for at in range(0, len(content), DELTA_CHARS):
            piece = content[at : at + DELTA_CHARS]
            sent += piece
            choice = {"index": 0, "finish_reason": None,
                      "message": {"role": "assistant", "content": sent},
                      "delta": {"role": "assistant", "content": piece}}  # fmt: skip
            chunk = common | {"object": "chat.completion.chunk", "choices": [choice]}
            frames.append(f"data: {json.dumps(chunk, ensure_ascii=False)}\r\n\r\n")
        final = {"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": sent},
                 "delta": {"role": "assistant", "content": ""}}  # fmt: skip
        chunk = common | {"object": "chat.completion.chunk", "choices": [final], "usage": usage}
        frames.append(f"data: {json.dumps(chunk, ensure_ascii=False)}\r\n\r\n")
        frames.append("data: [DONE]\r\n\r\n")
        stall = 0.0
        last_delta = len(frames) - 2  # frames before it are deltas
        if draw.fault == "truncate":
            frames = frames[: draw.rng.randint(1, last_delta)]
            stall = float(draw.params.get("stall_seconds", 0.0))
        elif draw.fault == "midstream_error":
            frames = frames[: draw.rng.randint(1, last_delta)]
            kind = str(draw.params.get("code", "internal_server_error"))
            error = {"error": {"message": "An internal error occurred while generating.",
                               "type": kind, "code": 500}}  # fmt: skip
            frames.append(f"event: error\r\ndata: {json.dumps(error)}\r\n\r\n")
        chunks = paced(draw, frames, stall)
        return SimResponse(200, {"Content-Type": "text/event-stream; charset=utf-8"}, chunks=chunks)
