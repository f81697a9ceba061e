"""Alibaba DashScope native text generation (docs/platforms.md §9).

`POST /api/v1/services/aigc/text-generation/generation`, `Authorization: Bearer`. Streams when
the request has `X-DashScope-SSE: enable` or `Accept: text/event-stream`; frames are

    id:1
    event:result
    :HTTP_STATUS/200
    data:{"output":{"choices":[{"message":{...},"finish_reason":"null"}],"search_info":{...}},
          "usage":{...},"request_id":"..."}

with `finish_reason` the string "null" until the last frame ("stop"); no `[DONE]`.
`incremental_output: true` sends deltas, otherwise each frame carries the whole text so far.
With `enable_search` + `search_options.enable_source` the answer carries `[n]` markers (after
the cited sentence) into `output.search_info.search_results[index=n]`, plus one result no
marker cites. Errors: `{"code","message","request_id"}` bodies (401 InvalidApiKey, 400
InvalidParameter, 429 Throttling.RateQuota without Retry-After, 500 InternalError); mid-stream
`event:error` + `:HTTP_STATUS/<code>` + that body. `x-request-id` = body `request_id`.
"""

from __future__ import annotations

import json
from typing import Any

from ..content import SimAnswer, SimCitation
from ..faults import HTTP_FAULTS, STREAM_FAULTS, Draw
from ..protocol import PlatformProtocol, SimRequest, SimResponse, all_text, paced

PATH = "/api/v1/services/aigc/text-generation/generation"
DELTA_CHARS = 10
SITE_NAMES = {"en.wikipedia.org": "维基百科", "www.reddit.com": "Reddit", "www.g2.com": "G2"}


def _object(value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def _request_id(draw: Draw) -> str:
    value = f"{draw.rng.getrandbits(128):032x}"
    return f"{value[:8]}-{value[8:12]}-{value[12:16]}-{value[16:20]}-{value[20:]}"


def _error(code: str, message: str, request_id: str) -> dict[str, Any]:
    return {"code": code, "message": message, "request_id": request_id}


def _question(body: dict[str, Any]) -> str | None:
    messages = (
        (body.get("input") or {}).get("messages") if isinstance(body.get("input"), dict) else None
    )
    if not isinstance(messages, list) or not messages:
        return None
    return all_text(messages)


def _with_markers(
    answer: SimAnswer, draw: Draw, neutral: tuple[str, ...]
) -> tuple[SimAnswer, list[dict[str, Any]]]:
    """The answer as Qwen writes it: `[n]` after each cited sentence, the spans shifted, and
    the search results (one index per URL, plus one result no marker cites)."""
    marked = SimAnswer(text=answer.text, mentioned=answer.mentioned, language=answer.language)
    indexes: dict[str, int] = {}
    results: list[dict[str, Any]] = []
    shift = 0
    for citation in answer.citations:
        if citation.url not in indexes:
            indexes[citation.url] = len(indexes) + 1
            domain = citation.url.split("/")[2]
            results.append(
                {
                    "index": indexes[citation.url],
                    "title": citation.title,
                    "url": citation.url,
                    "site_name": SITE_NAMES.get(domain, domain),
                    "icon": "https://img.alicdn.com/imgextra/i1/site-icon.svg",
                }
            )
        marker = f"[{indexes[citation.url]}]"
        end = citation.end + shift
        marked.text = marked.text[:end] + marker + marked.text[end:]
        marked.citations.append(
            SimCitation(
                citation.url,
                citation.title,
                citation.start + shift,
                end,
                citation.cited_text,
                citation.brand,
            )
        )
        shift += len(marker)
    if results and neutral:
        domain = draw.rng.choice(neutral)
        results.append(
            {
                "index": len(results) + 1,
                "title": "Background reading",
                "site_name": domain,
                "url": f"https://{domain}/wiki/Cloud_computing",
                "icon": "https://img.alicdn.com/imgextra/i1/site-icon.svg",
            }
        )
    return marked, results


class QwenProtocol(PlatformProtocol):
    name = "qwen"
    faults = HTTP_FAULTS | STREAM_FAULTS

    def rate_limited(self, draw: Draw) -> SimResponse:
        # DashScope sends no Retry-After (none found in the SDKs or docs).
        message = "Requests rate limit exceeded, please try again later."
        return SimResponse.json(429, _error("Throttling.RateQuota", message, _request_id(draw)))

    def server_error(self, draw: Draw, *, overloaded: bool = False) -> SimResponse:
        status = int(draw.params.get("status", 503 if overloaded else 500))
        code = "ServiceUnavailable" if status == 503 else "InternalError"
        message = (
            "An internal error has occured, please try again later or contact service support."
        )
        return SimResponse.json(status, _error(code, message, _request_id(draw)))

    def auth_error(self, draw: Draw) -> SimResponse:
        if int(draw.params.get("status", 401)) == 403:
            message = "Access denied, please make sure your account is in good standing."
            return SimResponse.json(403, _error("Arrearage", message, _request_id(draw)))
        message = "Invalid API-key provided."
        return SimResponse.json(401, _error("InvalidApiKey", message, _request_id(draw)))

    def handle(self, request: SimRequest) -> SimResponse:
        if request.method != "POST" or request.path != PATH:
            return SimResponse.json(404, _error("NotFound", "Not found!", "sim-not-found"))
        key = request.bearer()
        if not key:
            message = "No API-key provided."
            return SimResponse.json(401, _error("InvalidApiKey", message, "sim-no-key"))
        body = request.json()
        question = _question(body) if isinstance(body, dict) else None
        if not isinstance(body, dict) or not body.get("model") or question is None:
            message = "Model not specified or input.messages missing."
            return SimResponse.json(400, _error("InvalidParameter", message, "sim-bad-request"))
        draw = self.sim.draw(self.name, question, self.faults)
        request_id = _request_id(draw)
        headers = {
            "x-request-id": request_id,
            "req-cost-time": "812",
            "x-dashscope-call-gateway": "true",
        }
        if key.startswith("invalid"):
            return self._respond(self.auth_error(draw), headers, draw)
        if (failure := self.http_fault(draw)) is not None:
            if failure.body.startswith(b"{"):
                payload = json.loads(failure.body) | {"request_id": request_id}
                failure.body = json.dumps(payload, ensure_ascii=False).encode()
            return self._respond(failure, headers, draw)
        parameters = _object(body.get("parameters"))
        search = bool(parameters.get("enable_search"))
        with_sources = search and bool(
            _object(parameters.get("search_options")).get("enable_source")
        )
        answer = self.sim.answer_for(question, draw)
        search_info: dict[str, Any] | None = None
        if with_sources:
            answer, results = _with_markers(answer, draw, self.sim.world.neutral_domains)
            search_info = {"search_results": results, "extra_tool_info": []}
        else:
            answer.citations = []
        self.record(question, draw, answer, request_id, request_id)
        thinking = bool(parameters.get("enable_thinking"))
        streaming = request.headers.get("x-dashscope-sse", "").lower() == "enable" or (
            "text/event-stream" in request.headers.get("accept", "")
        )
        if not streaming:
            body = self._body(answer.text, "stop", search_info, thinking, request_id, search)
            if draw.fault == "midstream_error":  # the non-stream form of a failed generation
                body = _error("InternalError", "An internal error has occured.", request_id)
                return self._respond(SimResponse.json(500, body), headers, draw)
            return self._respond(SimResponse.json(200, body), headers, draw)
        incremental = bool(parameters.get("incremental_output", False))
        chunks = self._stream(
            draw, answer.text, search_info, thinking, request_id, incremental, search
        )
        sse_headers = {"Content-Type": "text/event-stream;charset=UTF-8"}
        return self._respond(SimResponse(200, sse_headers, chunks=chunks), headers, draw)

    @staticmethod
    def _body(
        text: str,
        finish_reason: str,
        search_info: dict[str, Any] | None,
        reasoning: str | bool,
        request_id: str,
        search: bool,
    ) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if reasoning:
            message["reasoning_content"] = (
                reasoning if isinstance(reasoning, str) else "嗯，先想一想。"
            )
        output: dict[str, Any] = {"choices": [{"finish_reason": finish_reason, "message": message}]}
        if search_info is not None:
            output["search_info"] = search_info
        usage: dict[str, Any] = {"input_tokens": 31, "output_tokens": len(text) // 2 + 1}
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
        if search:
            usage["plugins"] = {"search": {"count": 1, "strategy": "turbo"}}
        return {"output": output, "usage": usage, "request_id": request_id}

    def _stream(
        self,
        draw: Draw,
        text: str,
        search_info: dict[str, Any] | None,
        thinking: bool,
        request_id: str,
        incremental: bool,
        search: bool,
    ) -> list[bytes | float]:
        bodies: list[dict[str, Any]] = []
        if thinking:
            for piece in ("嗯，", "用户想比较", "几家供应商。"):
                bodies.append(self._body("", "null", search_info, piece, request_id, search))
        pieces = [text[i : i + DELTA_CHARS] for i in range(0, len(text), DELTA_CHARS)] or [""]
        sent = ""
        for number, piece in enumerate(pieces):
            sent += piece
            last = number == len(pieces) - 1
            bodies.append(
                self._body(
                    piece if incremental else sent,
                    "stop" if last else "null",
                    search_info,
                    False,
                    request_id,
                    search,
                )
            )
        frames = [(200, "result", body) for body in bodies]
        stall = 0.0
        if draw.fault == "truncate":
            frames = frames[: draw.rng.randint(1, len(frames) - 1)] if len(frames) > 1 else []
            stall = float(draw.params.get("stall_seconds", 0.0))
        elif draw.fault == "midstream_error":
            frames = frames[: draw.rng.randint(1, len(frames) - 1)] if len(frames) > 1 else []
            status = int(draw.params.get("status", 500))
            code = str(draw.params.get("code", "InternalError" if status >= 500 else "Throttling"))
            message = "An internal error has occured during generation."
            frames.append((status, "error", _error(code, message, request_id)))
        encoded = []
        for number, (status, event, payload) in enumerate(frames, start=1):
            data = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
            encoded.append(f"id:{number}\nevent:{event}\n:HTTP_STATUS/{status}\ndata:{data}\n\n")
        return paced(draw, encoded, stall)
