"""SerpApi: Google AI Mode and Google AI Overviews through serpapi.com (docs/platforms.md §15).

Asynchronous, by SerpApi's own `async=true` and Search Archive:
    submit         GET /search?engine=<engine>&q=..&gl=..&hl=..&device=..&async=true
                   -> `search_metadata.id` (status "Processing"): the upstream id
    poll           GET /searches/{id}.json -> `search_metadata.status` Queued / Processing
                   (running), Success (completed), Error (failed); 404 / 410 (expired from
                   the archive): lost
    fetch_evidence GET /searches/{id}.json; for an AI Overview that Google lazy-loaded
                   (`ai_overview` holds only a `page_token`), the follow-up its docs describe:
                   GET /search?engine=google_ai_overview&page_token=<token> (the token
                   expires within 4 minutes of the search, so it is fetched at once)
Engines: `google_ai_mode` (the answer is the top-level `text_blocks` / `references`) and
`google` (the answer is its `ai_overview`). The key is SerpApi's `api_key` query parameter; it is
a registered secret (connectors/redaction.py) and is never written into evidence.

Evidence: one JSON envelope of every exchange, request parameters without the key and the body
as received (`parse` reads it back, so `reparse` and the live path agree; it also reads a
single search JSON, as the archive or the playground gives it):
    {"object": "geo.serpapi.exchanges", "version": 1, "engine": "google",
     "exchanges": [{"step": "search" | "ai_overview", "path": "/searches/<id>.json",
                    "params": {...}, "status_code": 200, "body": "<json text>"}, ...]}

Reading: the answer is the text blocks joined by blank lines (a list block: one line per
item, "title: snippet"); each block (or list item) with `reference_indexes` cites the
`references` of those `index`es, its span the block's text. References no block points at were
shown beside the answer but not cited: they are its found sources (`found`). SerpApi documents
no field for the searches Google ran (no query fan-out). No AI Overview (Google showed none)
is an answer: empty, with the warning `NO_AI_OVERVIEW`. A search whose
`search_metadata.status` is "Error", or whose top-level `error` says there is nothing to
show, failed (`UPSTREAM_FAILED`).

Errors: `{"error": "<message>"}`; 400 invalid (a missing parameter), 401 / 403 auth, 429 the
hourly throughput limit (rate limited) unless "run out of searches" (the plan's quota: auth, not
retried), 410 gone, 5xx transient. No request id header, no retry hint documented. SerpApi has
no client reference to find a search by, and no cancel: `supports_lookup` False, `cancellable`
False.

Served as the vendor `serpapi` of the surfaces `google_ai_mode` and `google_ai_overview`
(connectors/platforms.py): GEO_<SURFACE>_VENDOR=serpapi, the key in GEO_SERPAPI_API_KEY (one
account for both). Configuration (`ConnectorConfig.extra`, GEO_SERPAPI_EXTRA), all optional:
`regions`, `languages` (the targets accepted), `no_cache` (true: never a cached search).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar

from ..base import (
    Capabilities,
    Citation,
    Connector,
    ConnectorConfig,
    ErrorClass,
    NormalizedResult,
    PollOutcome,
    SampleRequest,
    SubmitOutcome,
    UpstreamError,
)
from ..citations import CitationList, found_sources
from ..direct import failed
from ..errors import classify_http_error, error_dict, json_body
from ..transport import HttpExchange, HttpTransport

ENVELOPE_OBJECT = "geo.serpapi.exchanges"
ENVELOPE_MIME = "application/vnd.geo.serpapi-exchanges+json"
ENVELOPE_VERSION = 1
SEARCH_PATH = "/search"  # as the official client asks (`/search.json` is the same)
NO_AI_OVERVIEW = "NO_AI_OVERVIEW"
DEFERRED_AI_OVERVIEW = "DEFERRED_AI_OVERVIEW"
# The language a target is asked in when it names none, by region (Google's `hl`).
REGION_LANGUAGES: dict[str, str] = {
    "us": "en", "gb": "en", "ca": "en", "au": "en", "in": "en", "sg": "en", "ie": "en",
    "nz": "en", "za": "en", "de": "de", "ch": "de", "fr": "fr", "es": "es", "mx": "es",
    "it": "it", "nl": "nl", "br": "pt", "jp": "ja", "kr": "ko", "id": "id", "pl": "pl",
    "se": "sv",
}  # fmt: skip
LANGUAGES = frozenset(REGION_LANGUAGES.values())
# Google's `gl` is the ISO code except for the United Kingdom.
_GL = {"gb": "uk"}
DEVICES = frozenset({"desktop", "mobile"})
_POLL_STATES = {"queued": "queued", "processing": "running", "success": "completed",
                "error": "failed"}  # fmt: skip
_QUOTA = "run out of searches"


def serpapi_error(
    status: int, headers: dict[str, str], body: bytes, *, egress: str | None = None
) -> UpstreamError:
    """A non-2xx SerpApi answer as an UpstreamError; the message is its `error` string."""
    error = classify_http_error(status, headers, body, egress=egress)
    payload = json_body(body)
    message = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(message, str) and message:
        error.message = message[:300]
        error.args = (error.message,)
        if status == 429 and _QUOTA in message.lower():
            error.error_class = ErrorClass.AUTH  # the plan's searches are used up
    return error


@dataclass
class Exchange:
    """One recorded call of the envelope."""

    step: str
    path: str
    params: dict[str, str]
    status_code: int | None
    body: bytes

    def record(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "path": self.path,
            "params": self.params,
            "status_code": self.status_code,
            "body": self.body.decode("utf-8", errors="replace"),
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Exchange:
        params = record.get("params")
        status = record.get("status_code")
        body = record.get("body")
        return cls(
            step=str(record.get("step") or "search"),
            path=str(record.get("path") or ""),
            params={str(k): str(v) for k, v in params.items()} if isinstance(params, dict) else {},
            status_code=status if isinstance(status, int) else None,
            body=body.encode("utf-8") if isinstance(body, str) else b"",
        )

    def json(self) -> dict[str, Any] | None:
        payload = json_body(self.body)
        return payload if isinstance(payload, dict) else None


def envelope_bytes(engine: str, exchanges: list[Exchange]) -> bytes:
    envelope = {
        "object": ENVELOPE_OBJECT,
        "version": ENVELOPE_VERSION,
        "engine": engine,
        "exchanges": [exchange.record() for exchange in exchanges],
    }
    return json.dumps(envelope, ensure_ascii=False).encode("utf-8")


def _blocks_text(
    blocks: Any, references: dict[int, dict[str, Any]]
) -> tuple[str, list[tuple[int, int, list[int]]]]:
    """The blocks' text, and each cited span: (start, end, reference indexes)."""
    text = ""
    spans: list[tuple[int, int, list[int]]] = []

    def add(piece: str, indexes: Any, *, separator: str) -> None:
        nonlocal text
        piece = piece.strip()
        if not piece:
            return
        if text:
            text += separator
        start = len(text)
        text += piece
        cited = [i for i in indexes if isinstance(i, int) and i in references] if isinstance(
            indexes, list) else []  # fmt: skip
        if cited:
            spans.append((start, len(text), cited))

    for block in blocks if isinstance(blocks, list) else []:
        if not isinstance(block, dict):
            continue
        items = block.get("list")
        if isinstance(items, list):
            if block.get("snippet"):
                add(str(block["snippet"]), block.get("reference_indexes"), separator="\n\n")
            first = True
            for item in items:
                if not isinstance(item, dict):
                    continue
                title, snippet = str(item.get("title") or ""), str(item.get("snippet") or "")
                line = f"{title}: {snippet}" if title and snippet else title or snippet
                add(line, item.get("reference_indexes"), separator="\n\n" if first else "\n")
                first = False
            continue
        add(str(block.get("snippet") or ""), block.get("reference_indexes"), separator="\n\n")
    return text, spans


def answer_of(holder: dict[str, Any]) -> tuple[str, CitationList, list[Citation]]:
    """The answer text, its citations and the sources found and not cited, of an object
    holding `text_blocks` and `references`: a reference a block points at is cited there, one
    none points at was listed beside the answer (Google shows it) and is found."""
    references = {
        int(ref["index"]): ref
        for ref in holder.get("references") or []
        if isinstance(ref, dict) and isinstance(ref.get("index"), int) and ref.get("link")
    }
    text, spans = _blocks_text(holder.get("text_blocks"), references)
    citations = CitationList(len(text))
    for start, end, indexes in spans:
        for index in indexes:
            ref = references[index]
            citations.add(str(ref["link"]), title=ref.get("title"), start=start, end=end)
    listed = [(str(ref["link"]), ref.get("title") or None) for ref in references.values()]
    return text, citations, found_sources(citations.items, listed)


class SerpApiConnector(Connector):
    """One SerpApi engine serving one consumer surface (the platform it is configured for)."""

    platform: ClassVar[str] = "serpapi"
    engine: ClassVar[str] = ""
    default_base_url: ClassVar[str] = "https://serpapi.com"

    def __init__(self, config: ConnectorConfig) -> None:
        super().__init__(config)
        self.platform = config.platform  # type: ignore[misc]  # the surface it serves
        self.transport = HttpTransport(config)

    def capabilities(self) -> Capabilities:
        regions = self.config.extra.get("regions") or REGION_LANGUAGES
        return Capabilities(
            platform=self.platform,
            devices=DEVICES,
            regions=frozenset(regions),
            modes=frozenset({"web_search"}),
            screenshots=False,
            submission_limit=1,
            asynchronous=True,
            supports_lookup=False,
            cancellable=False,  # SerpApi documents no way to stop a search
            languages=frozenset(self.config.extra.get("languages") or LANGUAGES),
        )

    # --- the wire -----------------------------------------------------------------------
    def search_params(self, request: SampleRequest) -> dict[str, str]:
        """What the search asks (without the key)."""
        params = {
            "engine": self.engine,
            "q": request.question,
            "gl": _GL.get(request.region, request.region),
            "hl": request.language or REGION_LANGUAGES.get(request.region, "en"),
            "device": request.device if request.device in DEVICES else "desktop",
            "async": "true",
            "output": "json",
        }
        if self.config.extra.get("no_cache"):
            params["no_cache"] = "true"
        return params

    def _get(self, path: str, params: dict[str, str], *, attempt_no: int = 1) -> HttpExchange:
        return self.transport.request(
            "GET",
            path,
            attempt_no=attempt_no,
            headers={"Accept": "application/json"},
            params=params | {"api_key": self.config.api_key},
        )

    def _ok(self, exchange: HttpExchange) -> dict[str, Any]:
        if not exchange.ok:
            raise serpapi_error(
                exchange.status_code, exchange.headers, exchange.body, egress=exchange.egress
            )
        payload = json_body(exchange.body)
        if not isinstance(payload, dict):
            message = f"not a SerpApi JSON body (content-type {exchange.content_type!r})"
            raise UpstreamError(ErrorClass.PARSE_FAILED, message, raw=exchange.body)
        return payload

    def submit(self, request: SampleRequest, *, attempt_no: int = 1) -> SubmitOutcome:
        exchange = self._get(SEARCH_PATH, self.search_params(request), attempt_no=attempt_no)
        payload = self._ok(exchange)
        metadata = payload.get("search_metadata")
        search_id = metadata.get("id") if isinstance(metadata, dict) else None
        if not isinstance(search_id, str) or not search_id:
            message = "SerpApi accepted the search but gave no search_metadata.id"
            raise UpstreamError(ErrorClass.UPSTREAM_FAILED, message, raw=exchange.body)
        return SubmitOutcome(upstream_id=search_id, egress=exchange.egress)

    def _archive(self, upstream_id: str) -> HttpExchange:
        return self._get(f"/searches/{upstream_id}.json", {"output": "json"})

    def poll(self, upstream_id: str) -> PollOutcome:
        exchange = self._archive(upstream_id)
        if exchange.status_code in (404, 410):
            return PollOutcome("lost", message=_message(exchange.body, exchange.status_code))
        if exchange.status_code >= 500:
            payload = json_body(exchange.body)
            status = _status(payload)
            if status == "error":  # the search itself failed; the archive says so with a 503
                return PollOutcome("failed", message=_message(exchange.body, 503))
        payload = self._ok(exchange)
        state = _POLL_STATES.get(_status(payload) or "", "running")
        message = str(payload["error"]) if state == "failed" and payload.get("error") else None
        return PollOutcome(state, message=message)

    def fetch_evidence(self, upstream_id: str, *, sample_id: int | None = None) -> NormalizedResult:
        path = f"/searches/{upstream_id}.json"
        exchange = self._archive(upstream_id)
        if exchange.status_code in (404, 410):
            raise UpstreamError(ErrorClass.LOST, _message(exchange.body, exchange.status_code))
        if not exchange.ok and exchange.status_code < 500:
            raise serpapi_error(
                exchange.status_code, exchange.headers, exchange.body, egress=exchange.egress
            )
        exchanges = [Exchange("search", path, {}, exchange.status_code, exchange.body)]
        exchanges += self.follow_up(exchange)
        result = self.parse(envelope_bytes(self.engine, exchanges), content_type=ENVELOPE_MIME,
                            sample_id=sample_id)  # fmt: skip
        result.upstream_id = result.upstream_id or upstream_id
        return result

    def follow_up(self, exchange: HttpExchange) -> list[Exchange]:
        """The requests a finished search needs before it is the whole answer."""
        return []

    def lookup(self, idempotency_key: str) -> str | None:
        raise UpstreamError(ErrorClass.UNSUPPORTED, "SerpApi cannot find a search by our key")

    # --- reading ------------------------------------------------------------------------
    @classmethod
    def parse(
        cls, raw: bytes, *, content_type: str = "", sample_id: int | None = None
    ) -> NormalizedResult:
        payload = json_body(raw)
        if not isinstance(payload, dict):
            message = f"not a SerpApi JSON body (content-type {content_type!r})"
            return failed(raw, content_type or "application/octet-stream", sample_id,
                          error_dict(ErrorClass.PARSE_FAILED, message))  # fmt: skip
        if payload.get("object") == ENVELOPE_OBJECT:
            records = payload.get("exchanges")
            exchanges = [Exchange.from_record(r) for r in records if isinstance(r, dict)] if (
                isinstance(records, list)) else []  # fmt: skip
            engine = str(payload.get("engine") or cls.engine)
            mime = ENVELOPE_MIME
        else:  # one search, captured on its own
            exchanges = [Exchange("search", "", {}, None, raw)]
            params = payload.get("search_parameters")
            engine = str(params.get("engine")) if isinstance(params, dict) else cls.engine
            mime = content_type or "application/json"
        return read_exchanges(engine, exchanges, raw, mime, sample_id)


def _status(payload: Any) -> str | None:
    metadata = payload.get("search_metadata") if isinstance(payload, dict) else None
    status = metadata.get("status") if isinstance(metadata, dict) else None
    return str(status).lower() if status else None


def _message(body: bytes, status: int) -> str:
    payload = json_body(body)
    message = payload.get("error") if isinstance(payload, dict) else None
    return str(message)[:300] if message else f"HTTP {status}"


def _failed(
    raw: bytes,
    mime: str,
    sample_id: int | None,
    error_class: ErrorClass,
    message: str,
    upstream_id: str | None = None,
) -> NormalizedResult:
    result = failed(raw, mime, sample_id, error_dict(error_class, message))
    result.upstream_id = upstream_id
    return result


def read_exchanges(
    engine: str, exchanges: list[Exchange], raw: bytes, mime: str, sample_id: int | None
) -> NormalizedResult:
    """The answer of a recorded search (and its follow-up), by the rules in the docstring."""
    search = exchanges[0].json() if exchanges else None
    if search is None:
        return _failed(raw, mime, sample_id, ErrorClass.PARSE_FAILED, "no search JSON recorded")
    metadata = search.get("search_metadata")
    upstream_id = str(metadata["id"]) if isinstance(metadata, dict) and metadata.get("id") else None
    status = _status(search)
    if status in ("processing", "queued"):
        message = f"the search is still {status}"
        return _failed(raw, mime, sample_id, ErrorClass.PARSE_FAILED, message, upstream_id)
    if status == "error" or (exchanges[0].status_code or 200) >= 400:
        message = str(search.get("error") or f"search status {status}")
        return _failed(raw, mime, sample_id, ErrorClass.UPSTREAM_FAILED, message, upstream_id)
    warnings: list[str] = []
    holder: dict[str, Any] | None = search
    if engine != "google_ai_mode":
        holder, warnings, problem = _overview(search, exchanges[1:])
        if problem is not None:
            result = failed(raw, mime, sample_id, problem)
            result.upstream_id = upstream_id
            return result
    elif not search.get("text_blocks") and search.get("error"):
        message = str(search["error"])
        return _failed(raw, mime, sample_id, ErrorClass.UPSTREAM_FAILED, message, upstream_id)
    text, citations, found = answer_of(holder or {})
    result = NormalizedResult.answer(
        raw,
        mime,
        sample_id,
        upstream_id,
        text,
        citations=citations.items,
        warnings=warnings,
        found=found,
    )
    result.status_code = exchanges[-1].status_code
    return result


def _overview(
    search: dict[str, Any], follow_ups: list[Exchange]
) -> tuple[dict[str, Any] | None, list[str], dict[str, Any] | None]:
    """The AI Overview of a Google search: (the object holding it, warnings, a failure)."""
    overview = search.get("ai_overview")
    if not isinstance(overview, dict):
        return None, [NO_AI_OVERVIEW], None  # Google showed none: that is the answer
    if overview.get("text_blocks"):
        return overview, [], None
    if not overview.get("page_token"):
        return None, [NO_AI_OVERVIEW], None
    if not follow_ups:
        message = "the AI Overview was deferred (page_token) and not fetched"
        return None, [], error_dict(ErrorClass.UPSTREAM_FAILED, message)
    follow = follow_ups[0]
    payload = follow.json()
    if payload is None or (follow.status_code or 200) >= 400:
        message = _message(follow.body, follow.status_code or 0)
        return None, [], error_dict(ErrorClass.UPSTREAM_FAILED, f"AI Overview follow-up: {message}")
    deferred = payload.get("ai_overview")
    if not isinstance(deferred, dict) or not deferred.get("text_blocks"):
        message = str(payload.get("error") or "the deferred AI Overview came back empty")
        return None, [], error_dict(ErrorClass.UPSTREAM_FAILED, f"AI Overview follow-up: {message}")
    return deferred, [DEFERRED_AI_OVERVIEW], None


class SerpApiAIMode(SerpApiConnector):
    """`google_ai_mode`: Google's AI Mode page."""

    engine = "google_ai_mode"


class SerpApiAIOverview(SerpApiConnector):
    """`google`: the AI Overview of a Google search, fetched with its page_token when deferred."""

    engine = "google"

    def follow_up(self, exchange: HttpExchange) -> list[Exchange]:
        payload = json_body(exchange.body)
        overview = payload.get("ai_overview") if isinstance(payload, dict) else None
        if not isinstance(overview, dict) or overview.get("text_blocks"):
            return []
        token = overview.get("page_token")
        if not isinstance(token, str) or not token:
            return []
        params = {"engine": "google_ai_overview", "page_token": token, "output": "json"}
        follow = self._get(SEARCH_PATH, params)
        if not follow.ok and follow.status_code not in (400, 404, 410):
            raise serpapi_error(follow.status_code, follow.headers, follow.body,
                                egress=follow.egress)  # fmt: skip
        return [Exchange("ai_overview", SEARCH_PATH, params, follow.status_code, follow.body)]
