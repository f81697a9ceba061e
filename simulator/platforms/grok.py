"""xAI's Responses API with the `web_search` agent tool (`POST /v1/responses`) (docs/platforms.md
§14).

The stream is OpenAI's Responses framing (`simulator/platforms/responses_wire.py`): `event:` +
`data:` frames with increasing `sequence_number`, ending in `response.completed`. What differs:
- inline citations are written into the text as `[[N]](url)` links after the sentence they
  support, and the `url_citation` annotations (character offsets) point at those links; they
  arrive on the finished part (`response.content_part.done`) and the completed response, never
  as `annotation.added` events (xAI's stream has none);
- the completed response carries a top-level `citations`: every URL the agent encountered,
  the cited ones and some it read but did not cite;
- `web_search_call` output items for the searches the agent ran; `usage` counts
  `num_server_side_tools_used` and `server_side_tool_usage_details`;
- errors are `{"code": "<status text>", "error": "<message>"}`: an incorrect key is a 400
  ("Incorrect API key provided: ..."), a missing one a 401; `search_parameters` (Live Search)
  is a 410. No request-id header and no retry hint (none documented).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..content import SimAnswer, SimCitation
from ..faults import HTTP_FAULTS, STREAM_FAULTS, Draw
from ..protocol import PlatformProtocol, SimRequest, SimResponse
from . import responses_wire as wire
from .openai_responses import RESPONSES_FIELDS, _echoed_request
from .responses_wire import Event

DELTA_CHARS = 12
STREAM_FAILURE = ("internal_error", "The model failed to generate a response.")
LIVE_SEARCH_GONE = (
    "Live search is deprecated. Please switch to the Agent Tools API: "
    "https://docs.x.ai/docs/guides/tools/overview"
)
# Request fields xAI's Responses API takes besides OpenAI's (`search_parameters` is refused).
XAI_FIELDS = RESPONSES_FIELDS | {"search_parameters"}


def _error(status: str, message: str) -> dict[str, Any]:
    return {"code": status, "error": message}


def _masked(key: str | None) -> str:
    key = key or ""
    return f"{key[:2]}***{key[-2:]}" if len(key) > 4 else "***"


def with_inline_links(answer: SimAnswer) -> SimAnswer:
    """The answer as xAI writes it: a `[[N]](url)` link after each cited span (N counts the
    distinct URLs), each citation now the span of its link."""
    text, shift = answer.text, 0
    numbers: dict[str, int] = {}
    citations: list[SimCitation] = []
    for citation in sorted(answer.citations, key=lambda c: c.end):
        number = numbers.setdefault(citation.url, len(numbers) + 1)
        link = f" [[{number}]]({citation.url})"
        at = citation.end + shift
        text = text[:at] + link + text[at:]
        start = at + 1  # the link itself, without the space before it
        citations.append(dataclasses.replace(citation, start=start, end=at + len(link),
                                             cited_text=link[1:]))  # fmt: skip
        shift += len(link)
    return dataclasses.replace(answer, text=text, citations=citations)


def url_annotations(answer: SimAnswer) -> list[dict[str, Any]]:
    return [
        {"type": "url_citation", "url": c.url, "title": c.title, "start_index": c.start,
         "end_index": c.end}
        for c in answer.citations
    ]  # fmt: skip


class GrokProtocol(PlatformProtocol):
    name = "grok"
    faults = HTTP_FAULTS | STREAM_FAULTS

    def rate_limited(self, draw: Draw) -> SimResponse:
        message = "You have reached the rate limit for this model. Please slow down."
        return SimResponse.json(429, _error("Too many requests", message))

    def server_error(self, draw: Draw, *, overloaded: bool = False) -> SimResponse:
        status = int(draw.params.get("status", 503 if overloaded else 500))
        text = "Service unavailable" if status == 503 else "Internal error"
        return SimResponse.json(status, _error(text, "The service encountered an error."))

    def auth_error(self, draw: Draw, key: str | None = None) -> SimResponse:
        message = (
            f"Incorrect API key provided: {_masked(key)}. "
            "You can obtain an API key from https://console.x.ai."
        )
        return SimResponse.json(400, _error("Client specified an invalid argument", message))

    def handle(self, request: SimRequest) -> SimResponse:
        if request.method != "POST" or request.path != "/v1/responses":
            return SimResponse.json(404, _error("Not found", "The requested URL was not found."))
        key = request.bearer()
        if not key:
            message = "No authorization header or an invalid authorization token was provided."
            return SimResponse.json(401, _error("Unauthorized", message))
        body = request.json()
        if not isinstance(body, dict) or not body.get("model") or "input" not in body:
            message = "Failed to deserialize the JSON body: missing field `model` or `input`"
            return SimResponse.json(422, _error("Unprocessable Entity", message))
        if "search_parameters" in body:
            return SimResponse.json(410, _error("Gone", LIVE_SEARCH_GONE))
        unknown = sorted(set(body) - XAI_FIELDS)
        if unknown:
            message = f"Unknown field `{unknown[0]}`"
            return SimResponse.json(422, _error("Unprocessable Entity", message))
        question = wire.question_of(body["input"])
        draw = self.sim.draw(self.name, question, self.faults)
        headers: dict[str, str] = {}
        if key.startswith("invalid") or draw.fault == "auth_error":
            return self._respond(self.auth_error(draw, key), headers, draw)
        if (failure := self.http_fault(draw)) is not None:
            return self._respond(failure, headers, draw)
        web_search = any(
            isinstance(t, dict) and t.get("type") == "web_search" for t in body.get("tools") or []
        )
        answer = self.sim.answer_for(question, draw)
        if not web_search:
            answer.citations = []
        answer = with_inline_links(answer)
        response = self._response(draw, str(body["model"]), answer, web_search)
        response |= _echoed_request(body)
        self.record(question, draw, answer, response["id"], None)
        if body.get("stream"):
            chunks = wire.answer_stream(draw, response, answer, self._item_events, STREAM_FAILURE)
            return self._respond(
                SimResponse(200, dict(wire.SSE_HEADERS), chunks=chunks), headers, draw
            )
        if draw.fault == "midstream_error":
            code, message = STREAM_FAILURE
            response |= {"status": "failed", "output": [], "citations": [],
                         "error": {"code": code, "message": message}}  # fmt: skip
        return self._respond(SimResponse.json(200, response), headers, draw)

    def _response(
        self, draw: Draw, model: str, answer: SimAnswer, web_search: bool
    ) -> dict[str, Any]:
        output: list[dict[str, Any]] = []
        encountered = list(dict.fromkeys(c.url for c in answer.citations))
        if web_search:
            output.append(wire.web_search_call(draw, answer.text[:40]))
            # Sources the agent read and did not cite.
            encountered.append(f"https://forum.example/t/{draw.rng.getrandbits(32):08x}")
        part = {"type": "output_text", "text": answer.text, "annotations": url_annotations(answer),
                "logprobs": []}  # fmt: skip
        output.append(wire.message(draw, part))
        tokens = len(answer.text) // 4 + 1
        searches = 1 if web_search else 0
        usage = {
            "input_tokens": 20,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 20 + tokens,
            "num_sources_used": len(encountered) if web_search else 0,
            "num_server_side_tools_used": searches,
            "server_side_tool_usage_details": {"web_search_calls": searches},
        }
        response = wire.response(draw_id(draw), model, output, usage)
        response["citations"] = encountered if web_search else []
        return response

    def _item_events(self, index: int, item: dict[str, Any], answer: SimAnswer) -> list[Event]:
        if item["type"] == "web_search_call":
            return wire.web_search_events(index, item)
        at = wire.part_at(index, item)
        text = answer.text
        events: list[Event] = [
            ("response.output_text.delta",
             at | {"delta": text[start : start + DELTA_CHARS], "logprobs": []})
            for start in range(0, len(text), DELTA_CHARS)
        ]  # fmt: skip
        return wire.message_events(index, item, events, logprobs=[])


def draw_id(draw: Draw) -> str:
    """xAI response ids are UUIDs."""
    value = f"{draw.rng.getrandbits(128):032x}"
    return f"{value[:8]}-{value[8:12]}-{value[12:16]}-{value[16:20]}-{value[20:]}"
