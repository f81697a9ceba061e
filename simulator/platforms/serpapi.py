"""SerpApi (serpapi.com): Google AI Mode and Google AI Overviews as JSON searches
(docs/platforms.md §15).

Every call is a GET with the `api_key` as a query parameter, answered with JSON:
    GET /search(.json)?engine=google_ai_mode&q=...&gl=..&hl=..&device=..[&async=true]
        the AI Mode answer: top-level `text_blocks` (paragraph / heading / list, each with
        `reference_indexes`) and `references` ({title, link, snippet, source, index}).
    GET /search(.json)?engine=google&q=...[&async=true]
        a Google search whose `ai_overview` holds the overview (`text_blocks`, `references`)
        when Google rendered it in the page; when Google lazy-loads it, `ai_overview` holds
        only a short-lived `page_token` (and its `serpapi_link`); when Google shows none,
        there is no `ai_overview`.
    GET /search(.json)?engine=google_ai_overview&page_token=...
        the deferred overview: `ai_overview` with `text_blocks` and `references`. A token is
        good for one fetch within 4 minutes; an unknown or spent one finds no overview.
    GET /searches/{search_id}.json
        the Search Archive: an `async=true` search, `search_metadata.status` "Processing"
        for the first `processing_looks` looks, then the finished search; 404 for an unknown
        id; 410 once the search expired from the archive (the `lose` fault).
Every search carries `search_metadata` {id, status Processing | Success | Error, json_endpoint,
created_at, processed_at, total_time_taken, ...} and echoes `search_parameters`.

Errors are `{"error": "<message>"}`: 400 a missing parameter ("Missing query `q` parameter."),
401 an invalid key, 429 the hourly throughput limit (or, with param `quota`, "Your account has
run out of searches."), 503 a search that failed (`search_metadata.status` "Error", the
`task_failed` and `server_error` faults). A search with nothing to show is a 200 "Success" whose
top-level `error` says so. No request-id header, no retry hint.

Profile `"serpapi": {"processing_looks": 1, "deferred_overview_rate": 0.5,
"absent_overview_rate": 0.0}` (every key optional).
"""

from __future__ import annotations

import dataclasses
import threading
from datetime import UTC, datetime
from typing import Any

from ..content import SimAnswer, SimCitation
from ..faults import HTTP_FAULTS, Draw
from ..protocol import PlatformProtocol, SimRequest, SimResponse

ENGINES = {
    "google_ai_mode": "google_ai_mode",
    "google": "google_ai_overview",
    "google_ai_overview": "google_ai_overview",
}
FAULTS = HTTP_FAULTS | frozenset({"task_failed", "lose"})
INVALID_KEY = "Invalid API key. Your API key should be here: https://serpapi.com/manage-api-key"
FAILED_SEARCH = "We couldn't get valid results for this search. Please try again later."
NO_OVERVIEW = "Google hasn't returned any results for this query."
DEFAULTS = {"processing_looks": 1, "deferred_overview_rate": 0.5, "absent_overview_rate": 0.0}


def _error(status: int, message: str, **fields: Any) -> SimResponse:
    return SimResponse.json(status, {**fields, "error": message})


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _domain(url: str) -> str:
    return url.split("//", 1)[-1].split("/", 1)[0]


@dataclasses.dataclass
class _Search:
    id: str
    body: dict[str, Any]  # the finished search, as the archive serves it
    looks: int = 0
    lost: bool = False


def blocks_for(answer: SimAnswer) -> tuple[list[dict[str, Any]], list[dict[str, Any]], SimAnswer]:
    """The answer as SerpApi's `text_blocks` and `references`, and the answer as a reader of
    them sees it (blocks joined by blank lines, each citation the span of its block).

    Each cited sentence is a paragraph block pointing at its references; the text between is
    an uncited paragraph. One more reference is listed that no block points at: a source the
    overview showed but did not cite."""
    blocks: list[dict[str, Any]] = []
    references: list[dict[str, Any]] = []
    index_of: dict[str, int] = {}
    pieces: list[tuple[str, list[SimCitation]]] = []
    cursor = 0
    for citation in sorted(answer.citations, key=lambda c: c.start):
        between = answer.text[cursor : citation.start].strip()
        if between:
            pieces.append((between, []))
        if citation.start < cursor:  # a second source for the span already taken
            pieces[-1][1].append(citation)
            continue
        pieces.append((answer.text[citation.start : citation.end].strip(), [citation]))
        cursor = citation.end
    if answer.text[cursor:].strip():
        pieces.append((answer.text[cursor:].strip(), []))
    text = ""
    citations: list[SimCitation] = []
    for snippet, cited in pieces:
        start = len(text) + (2 if text else 0)
        text = f"{text}\n\n{snippet}" if text else snippet
        indexes = []
        for citation in cited:
            if citation.url not in index_of:
                index_of[citation.url] = len(references)
                references.append(
                    {"title": citation.title, "link": citation.url, "snippet": citation.cited_text,
                     "source": _domain(citation.url), "index": len(references)}
                )  # fmt: skip
            indexes.append(index_of[citation.url])
            citations.append(
                dataclasses.replace(citation, start=start, end=len(text), cited_text=snippet)
            )
        block: dict[str, Any] = {"type": "paragraph", "snippet": snippet}
        if indexes:
            block["reference_indexes"] = indexes
        blocks.append(block)
    if references:
        references.append(
            {"title": "Community discussion", "link": "https://forum.example/t/overview",
             "snippet": "What people say.", "source": "forum.example", "index": len(references)}
        )  # fmt: skip
    return blocks, references, dataclasses.replace(answer, text=text, citations=citations)


class SerpApiProtocol(PlatformProtocol):
    name = "serpapi"
    faults = FAULTS

    def __init__(self, sim: Any) -> None:
        super().__init__(sim)
        self._lock = threading.Lock()
        self._searches: dict[str, _Search] = {}
        self._tokens: dict[str, dict[str, Any]] = {}  # page_token -> the deferred overview
        self._next = 0

    def reset(self) -> None:
        with self._lock:
            self._searches.clear()
            self._tokens.clear()
            self._next = 0

    def _settings(self, draw: Draw) -> dict[str, Any]:
        given = draw.profile.get("serpapi")
        return DEFAULTS | (given if isinstance(given, dict) else {})

    def _new_id(self) -> str:
        with self._lock:
            self._next += 1
            return f"{0x65A0000000000000 + self._next:016x}{self._next:08x}"

    # --- fault shapes -------------------------------------------------------------------
    def rate_limited(self, draw: Draw) -> SimResponse:
        if draw.params.get("quota"):
            return _error(429, "Your account has run out of searches.")
        return _error(429, "You have exceeded the hourly throughput limit for your plan.")

    def server_error(self, draw: Draw, *, overloaded: bool = False) -> SimResponse:
        status = int(draw.params.get("status", 503))
        return _error(status, FAILED_SEARCH)

    def auth_error(self, draw: Draw) -> SimResponse:
        return _error(401, INVALID_KEY)

    # --- routes -------------------------------------------------------------------------
    def handle(self, request: SimRequest) -> SimResponse:
        if request.method != "GET":
            return _error(404, "The requested resource doesn't exist.")
        params = {key: values[-1] for key, values in request.query.items() if values}
        key = params.get("api_key", "")
        if request.path.startswith("/searches/") and request.path.endswith(".json"):
            if not key or key.startswith("invalid"):
                return _error(401, INVALID_KEY)
            return self._archive(request.path.removeprefix("/searches/").removesuffix(".json"))
        if request.path not in ("/search", "/search.json"):
            return _error(404, "The requested resource doesn't exist.")
        engine = params.get("engine", "")
        if engine not in ENGINES:
            return _error(400, f"Unsupported `{engine}` search engine.")
        if engine == "google_ai_overview":
            if not params.get("page_token"):
                return _error(400, "Missing `page_token` parameter.")
        elif not params.get("q"):
            return _error(400, "Missing query `q` parameter.")
        if not key or key.startswith("invalid"):
            return _error(401, INVALID_KEY)
        if engine == "google_ai_overview":
            return self._deferred_overview(params)
        return self._search(engine, params)

    def _metadata(
        self, search_id: str, status: str, engine: str, params: dict[str, Any]
    ) -> dict[str, Any]:
        page = "https://www.google.com/search?q=" + str(params.get("q", "")).replace(" ", "+")
        if engine == "google_ai_mode":
            page += "&udm=50"
        return {
            "id": search_id,
            "status": status,
            "json_endpoint": f"https://serpapi.com/searches/{search_id}.json",
            "created_at": _now(),
            "processed_at": _now(),
            "google_url": page,
            "raw_html_file": f"https://serpapi.com/searches/{search_id}.html",
            "total_time_taken": 1.42,
        }

    @staticmethod
    def _parameters(engine: str, params: dict[str, Any]) -> dict[str, Any]:
        kept = ("q", "location", "gl", "hl", "device", "page_token")
        echoed = {"engine": engine} | {k: params[k] for k in kept if k in params}
        if engine != "google_ai_overview":
            echoed.setdefault("device", "desktop")
        return echoed

    def _search(self, engine: str, params: dict[str, Any]) -> SimResponse:
        surface = ENGINES[engine]
        question = str(params["q"])
        draw = self.sim.draw(surface, question, self.faults)
        if (failure := self.http_fault(draw)) is not None:
            return self._respond(failure, {}, draw)
        search_id = self._new_id()
        head = {
            "search_metadata": self._metadata(search_id, "Success", engine, params),
            "search_parameters": self._parameters(engine, params),
        }
        if draw.fault == "task_failed":
            head["search_metadata"]["status"] = "Error"
            body: dict[str, Any] = head | {"error": FAILED_SEARCH}
        else:
            body = head | self._results(surface, engine, question, draw, search_id)
        asynchronous = str(params.get("async", "")).lower() == "true"
        if not asynchronous:
            status = 503 if draw.fault == "task_failed" else 200
            return self._respond(SimResponse.json(status, body), {}, draw)
        with self._lock:
            self._searches[search_id] = _Search(search_id, body, lost=draw.fault == "lose")
        pending = {k: dict(v) for k, v in head.items()}
        pending["search_metadata"]["status"] = "Processing"
        pending["search_metadata"].pop("processed_at")
        return self._respond(SimResponse.json(200, pending), {}, draw)

    def _results(
        self, surface: str, engine: str, question: str, draw: Draw, search_id: str
    ) -> dict[str, Any]:
        answer = self.sim.answer_for(question, draw)
        blocks, references, seen = blocks_for(answer)
        if engine == "google_ai_mode":
            self.sim.record_answer(surface, question, draw, seen, upstream_id=search_id)
            return {"text_blocks": blocks, "references": references,
                    "reconstructed_markdown": seen.text}  # fmt: skip
        organic = {"organic_results": [
            {"position": 1, "title": "Result", "link": "https://vendor.example/", "snippet": "…"}
        ]}  # fmt: skip
        settings = self._settings(draw)
        roll = draw.rng.random()
        if roll < float(settings["absent_overview_rate"]):
            self.sim.record_answer(surface, question, draw, SimAnswer(), upstream_id=search_id)
            return organic
        overview = {"text_blocks": blocks, "references": references}
        self.sim.record_answer(surface, question, draw, seen, upstream_id=search_id)
        if roll < float(settings["absent_overview_rate"]) + float(
            settings["deferred_overview_rate"]
        ):
            token = f"tok_{draw.rng.getrandbits(96):024x}"
            with self._lock:
                self._tokens[token] = overview
            link = f"https://serpapi.com/search.json?engine=google_ai_overview&page_token={token}"
            return organic | {"ai_overview": {"page_token": token, "serpapi_link": link}}
        return organic | {"ai_overview": overview}

    def _deferred_overview(self, params: dict[str, Any]) -> SimResponse:
        token = str(params["page_token"])
        draw = self.sim.draw("google_ai_overview", token, HTTP_FAULTS)
        if (failure := self.http_fault(draw)) is not None:
            return self._respond(failure, {}, draw)
        with self._lock:
            overview = self._tokens.pop(token, None)  # one fetch per token
        search_id = self._new_id()
        body: dict[str, Any] = {
            "search_metadata": self._metadata(search_id, "Success", "google_ai_overview", params),
            "search_parameters": self._parameters("google_ai_overview", params),
        }
        if overview is None:
            body["error"] = NO_OVERVIEW
        else:
            body["ai_overview"] = overview
        return self._respond(SimResponse.json(200, body), {}, draw)

    def _archive(self, search_id: str) -> SimResponse:
        with self._lock:
            search = self._searches.get(search_id)
            if search is not None:
                search.looks += 1
        if search is None:
            return _error(404, "The requested resource doesn't exist.")
        if search.lost:
            return _error(410, "The search expired and has been deleted from the archive.")
        looks = int(DEFAULTS["processing_looks"])
        profile = self.sim.platform_profile("serpapi").get("serpapi")
        if isinstance(profile, dict):
            looks = int(profile.get("processing_looks", looks))
        if search.looks <= looks:
            pending = {k: dict(v) for k, v in search.body.items() if k in ("search_metadata",
                       "search_parameters")}  # fmt: skip
            pending["search_metadata"]["status"] = "Processing"
            return SimResponse.json(200, pending)
        failed = search.body["search_metadata"]["status"] == "Error"
        return SimResponse.json(503 if failed else 200, search.body)
