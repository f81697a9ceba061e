"""Bright Data's Web Scraper API: the AI answer engines' consumer UIs, scraped by prompt
(docs.brightdata.com, "Web Scraper API" and "AI scrapers"; docs/platforms.md §16; the official
client `brightdata-sdk` is the oracle in tests/fidelity/test_brightdata_sdk.py).

One host (`https://api.brightdata.com`), `Authorization: Bearer <API key>`
(GEO_BRIGHTDATA_API_KEY). One scraper ("dataset") per engine; every call is the same for all:
    POST /datasets/v3/trigger?dataset_id=D&include_errors=true
         body: a JSON array of inputs {url, prompt, country?, index, web_search? (ChatGPT)}
         -> 200 {"snapshot_id": "s_..."}: one snapshot per trigger
    GET  /datasets/v3/progress/{snapshot_id}
         -> {"snapshot_id", "dataset_id", "status": starting | running | ready | failed,
             "error_message"? (failed)}; 404 "Snapshot does not exist"
    GET  /datasets/v3/snapshot/{snapshot_id}?format=json
         -> 200 the records (a JSON array, one per input; an input that failed is a record
            with `error` / `error_code` and its `input`); 202 {"status", "message": "Snapshot
            is not ready yet, try again in 10s"} while it runs; 400 "Snapshot is empty" /
            "Snapshot is expired"; 404 "Snapshot does not exist"
    POST /datasets/v3/snapshot/{snapshot_id}/cancel
         -> 200 text/plain "OK"; 400 "Snapshot is not running"; 404
Errors (their "Error codes by endpoint" page): trigger 400 {"validation_errors": [...]} or a
message, 404 "dataset does not exist", 429 "You have too many running jobs for this dataset..."
(rate limited), 500; 401 a missing or invalid key.

A batch is one trigger per run in it: each request is one input whose `index` is its position
in the trigger (1-based; the docs' "unique ID for tracking each crawl request", echoed in its
record), and its upstream id is `<snapshot_id>:<index>` (the vendor task is the snapshot; the
index finds the sample's record in it). Cancel cancels the snapshot, so every sample of that
run's trigger, and never another run's.

Evidence: the sample's own record only, in a small envelope (the snapshot holds the batch's
other answers too):
    {"object": "geo.brightdata.record", "version": 1, "snapshot_id", "index", "dataset_id",
     "status_code", "record": {...the record as downloaded...}}
`parse` also reads a downloaded snapshot holding one record (a JSON array) or one record.

Reading a record: the answer is `answer_text_markdown`, else `answer_text`; `citations[]`
({url, title}) are what the answer cites; `search_sources[]` the sources the engine read
(those not cited become `found`); `web_search_query[]` the searches it ran (Perplexity). A
record with `error` failed (`UPSTREAM_FAILED`, its `error_code` kept).

No stated cost: none of these endpoints states what a snapshot cost. No lookup: the trigger
takes no client reference and the snapshot list (`GET /datasets/v3/snapshots`) names no input,
so a task whose trigger answer was lost cannot be found again (`supports_lookup` False).
Configuration (`ConnectorConfig.extra`: GEO_<SURFACE>_EXTRA, else GEO_BRIGHTDATA_EXTRA), all
optional: `dataset_id` (the surface's scraper to trigger: set it per surface), `regions` (the
countries accepted).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from ..base import (
    Capabilities,
    Connector,
    ConnectorConfig,
    ErrorClass,
    NormalizedResult,
    PollOutcome,
    SampleRequest,
    SubmitOutcome,
    UpstreamError,
)
from ..citations import CitationList, found_sources, search_queries
from ..direct import failed
from ..errors import classify_http_error, error_dict, json_body
from ..transport import HttpExchange, HttpTransport

API = "/datasets/v3"
SUBMISSION_LIMIT = 100
ENVELOPE_OBJECT = "geo.brightdata.record"
ENVELOPE_MIME = "application/vnd.geo.brightdata-record+json"
ENVELOPE_VERSION = 1
# The progress statuses of a snapshot still being built (the docs list starting and running;
# their guides name the phases collecting, digesting and building).
RUNNING = frozenset({"starting", "running", "collecting", "digesting", "building", "scheduled"})
# Countries a target may ask for (sent as the input's `country`): the markets the other vendors
# here serve too. The vendor publishes each scraper's own list (their "AI scrapers" page links
# github.com/brightdata/answer-engines-country-codes, which we could not read); a deployment
# that needs another country widens it with `extra.regions`.
REGIONS = frozenset(
    {"us", "gb", "ca", "au", "in", "sg", "ie", "de", "fr", "es", "it", "nl", "br", "mx", "jp"}
)


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def upstream_id_of(snapshot_id: str, index: int) -> str:
    return f"{snapshot_id}:{index}"


def run_of(request: SampleRequest) -> str:
    """The run a request belongs to, as its idempotency key names it (`<run>:<sample>:
    <attempt>`, sampling/steps.py); a key of another shape shares the empty group."""
    run, separator, _ = request.idempotency_key.partition(":")
    return run if separator else ""


def split_upstream_id(upstream_id: str) -> tuple[str, int | None]:
    """(snapshot id, input index) of an upstream id; a bare snapshot id has no index."""
    snapshot_id, _, index = upstream_id.rpartition(":")
    if snapshot_id and index.isdigit():
        return snapshot_id, int(index)
    return upstream_id, None


def _message(body: bytes) -> str:
    """The vendor's words for a refusal: `error` / `message` / the validation errors of a JSON
    body, else the plain-text body."""
    payload = json_body(body)
    if isinstance(payload, dict):
        for key in ("error", "message", "error_message"):
            if isinstance(payload.get(key), str) and payload[key]:
                return str(payload[key])[:300]
        if payload.get("validation_errors"):
            return "validation failed: " + json.dumps(payload["validation_errors"])[:280]
    if isinstance(payload, str) and payload:
        return payload[:300]
    return body[:300].decode("utf-8", errors="replace").strip()


def brightdata_error(exchange: HttpExchange) -> UpstreamError:
    """A non-2xx answer as an UpstreamError whose message is the vendor's."""
    error = classify_http_error(
        exchange.status_code, exchange.headers, exchange.body, egress=exchange.egress
    )
    message = _message(exchange.body)
    if message:
        error.message = message
        error.args = (message,)
    return error


def record_index(record: dict[str, Any]) -> int | None:
    """The input index a record answers: its own `index`, else its echoed `input`'s."""
    for holder in (record, _as_dict(record.get("input"))):
        index = holder.get("index")
        if isinstance(index, int) and not isinstance(index, bool):
            return index
        if isinstance(index, str) and index.isdigit():
            return int(index)
    return None


def pick_record(records: list[Any], index: int | None) -> dict[str, Any] | None:
    """The record of input `index` in a snapshot; without indexes in the snapshot at all, the
    record at that position (1-based)."""
    found = [_as_dict(r) for r in records]
    if index is None:
        return found[0] if len(found) == 1 else None
    for record in found:
        if record_index(record) == index:
            return record
    if not any(record_index(r) is not None for r in found) and 0 < index <= len(found):
        return found[index - 1]
    return None


def envelope_bytes(
    *,
    snapshot_id: str,
    index: int | None,
    dataset_id: str,
    status_code: int | None,
    record: dict[str, Any],
) -> bytes:
    envelope = {
        "object": ENVELOPE_OBJECT,
        "version": ENVELOPE_VERSION,
        "snapshot_id": snapshot_id,
        "index": index,
        "dataset_id": dataset_id,
        "status_code": status_code,
        "record": record,
    }
    return json.dumps(envelope, ensure_ascii=False).encode("utf-8")


class BrightDataConnector(Connector):
    """What every Bright Data AI scraper shares; a subclass names its scraper."""

    platform: ClassVar[str] = "brightdata"
    default_base_url: ClassVar[str] = "https://api.brightdata.com"
    # The scraper's dataset id and the page every input names (`url`); where each comes from
    # (the docs, the SDK, or neither) is in docs/platforms.md §16.
    dataset_id: ClassVar[str] = ""
    entry_url: ClassVar[str] = ""
    modes: ClassVar[frozenset[str]] = frozenset({"web_search"})

    def __init__(self, config: ConnectorConfig) -> None:
        super().__init__(config)
        self.platform = config.platform  # type: ignore[misc]  # the surface it serves
        self.transport = HttpTransport(config)

    @property
    def dataset(self) -> str:
        return str(self.config.extra.get("dataset_id") or self.dataset_id)

    def capabilities(self) -> Capabilities:
        regions = self.config.extra.get("regions") or REGIONS
        return Capabilities(
            platform=self.platform,
            devices=frozenset({"desktop"}),
            regions=frozenset(str(r).lower() for r in regions),
            modes=self.modes,
            screenshots=False,
            submission_limit=SUBMISSION_LIMIT,
            asynchronous=True,
            supports_lookup=False,
            languages=frozenset(),  # the scrapers take a country, never a language
        )

    # --- the wire ---------------------------------------------------------------------------
    def _call(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        body: Any = None,
        attempt_no: int = 1,
    ) -> HttpExchange:
        headers = {"Authorization": f"Bearer {self.config.api_key}", "Accept": "application/json"}
        return self.transport.request(
            method, f"{API}{path}", attempt_no=attempt_no, headers=headers, params=params,
            json_body=body,
        )  # fmt: skip

    def input_for(self, request: SampleRequest, index: int) -> dict[str, Any]:
        """One input as the scraper takes it (a surface adds its own fields)."""
        return {
            "url": self.entry_url,
            "prompt": request.question,
            "country": request.region.upper(),
            "index": index,
        }

    # --- submit -----------------------------------------------------------------------------
    def submit(self, request: SampleRequest, *, attempt_no: int = 1) -> SubmitOutcome:
        [outcome] = self.submit_batch([request], attempt_no=attempt_no)
        if isinstance(outcome, UpstreamError):
            raise outcome
        return outcome

    def submit_batch(
        self,
        requests: list[SampleRequest],
        *,
        attempt_no: int = 1,
        idempotency_key: str | None = None,
    ) -> list[SubmitOutcome | UpstreamError]:
        """One trigger per run in the batch: one snapshot each, each request an input of it.
        The vendor accepts or refuses a trigger as a whole; a refused one is the error of each
        of its requests. Runs never share a snapshot, because cancelling is per snapshot: a
        run's cancel must not stop another run's (another tenant's) collections."""
        if not requests:
            return []
        if len(requests) > SUBMISSION_LIMIT:
            raise UpstreamError(
                ErrorClass.INVALID, f"batch of {len(requests)} exceeds limit {SUBMISSION_LIMIT}"
            )
        by_run: dict[str, list[int]] = {}
        for position, request in enumerate(requests):
            by_run.setdefault(run_of(request), []).append(position)
        outcomes: list[SubmitOutcome | UpstreamError | None] = [None] * len(requests)
        for positions in by_run.values():
            try:
                triggered = self._trigger([requests[p] for p in positions], attempt_no=attempt_no)
            except UpstreamError as error:
                triggered = [error] * len(positions)
            for position, outcome in zip(positions, triggered, strict=True):
                outcomes[position] = outcome
        return [outcome for outcome in outcomes if outcome is not None]

    def _trigger(
        self, requests: list[SampleRequest], *, attempt_no: int
    ) -> list[SubmitOutcome | UpstreamError]:
        inputs = [self.input_for(r, position) for position, r in enumerate(requests, start=1)]
        # `format` on a trigger is the webhook delivery format (unused): the download asks.
        params = {"dataset_id": self.dataset, "include_errors": "true"}
        exchange = self._call("POST", "/trigger", params=params, body=inputs,
                              attempt_no=attempt_no)  # fmt: skip
        if not exchange.ok:
            raise brightdata_error(exchange)
        snapshot_id = _as_dict(json_body(exchange.body)).get("snapshot_id")
        if not isinstance(snapshot_id, str) or not snapshot_id:
            # Sent and answered 200, but with no snapshot to follow: whether the vendor
            # started a collection is unknown.
            raise exchange.error(
                ErrorClass.ACCEPTANCE_UNKNOWN, "trigger answered without a snapshot_id"
            )
        return [
            SubmitOutcome(upstream_id=upstream_id_of(snapshot_id, position), egress=exchange.egress)
            for position in range(1, len(requests) + 1)
        ]

    # --- after acceptance -------------------------------------------------------------------
    def poll(self, upstream_id: str) -> PollOutcome:
        snapshot_id, _ = split_upstream_id(upstream_id)
        exchange = self._call("GET", f"/progress/{snapshot_id}")
        if exchange.status_code == 404:
            return PollOutcome("lost", message=_message(exchange.body) or "no such snapshot")
        if not exchange.ok:
            raise brightdata_error(exchange).after_acceptance()
        payload = _as_dict(json_body(exchange.body))
        status = str(payload.get("status") or "").lower()
        if status == "ready":
            return PollOutcome("completed")
        if status in RUNNING:
            return PollOutcome("running", message=status)
        if not payload:
            raise UpstreamError(ErrorClass.POLL_FAILED, "progress answered without a status")
        # failed, or cancelled: the snapshot will never be ready.
        message = str(payload.get("error_message") or payload.get("error") or status)
        return PollOutcome("failed", message=message[:300])

    def fetch_evidence(self, upstream_id: str, *, sample_id: int | None = None) -> NormalizedResult:
        snapshot_id, index = split_upstream_id(upstream_id)
        exchange = self._call("GET", f"/snapshot/{snapshot_id}", params={"format": "json"})
        if exchange.status_code == 404:
            raise UpstreamError(ErrorClass.LOST, _message(exchange.body) or "no such snapshot")
        if exchange.status_code == 202:  # not ready yet: come back later
            raise UpstreamError(
                ErrorClass.POLL_FAILED,
                _message(exchange.body) or "snapshot not ready",
                status_code=202,
                retry_after=10.0,
            )
        if exchange.status_code == 400:  # empty or expired: nothing will ever come
            return self._no_record(exchange, snapshot_id, index, sample_id)
        if not exchange.ok:
            raise brightdata_error(exchange).after_acceptance()
        records = json_body(exchange.body)
        if not isinstance(records, list):
            records = [records] if isinstance(records, dict) else []
        record = pick_record(records, index)
        if record is None:
            return self._no_record(exchange, snapshot_id, index, sample_id)
        raw = envelope_bytes(snapshot_id=snapshot_id, index=index, dataset_id=self.dataset,
                             status_code=exchange.status_code, record=record)  # fmt: skip
        result = self.parse(raw, content_type=ENVELOPE_MIME, sample_id=sample_id)
        result.status_code = exchange.status_code
        result.upstream_id = upstream_id
        return result

    def _no_record(
        self, exchange: HttpExchange, snapshot_id: str, index: int | None, sample_id: int | None
    ) -> NormalizedResult:
        """The snapshot answered, but holds no record for this input: failed upstream, with
        what the vendor said kept as the raw."""
        message = _message(exchange.body) if exchange.status_code >= 400 else ""
        message = message or f"snapshot {snapshot_id} has no record for input {index}"
        result = failed(exchange.body, exchange.content_type or "application/json", sample_id,
                        error_dict(ErrorClass.UPSTREAM_FAILED, message))  # fmt: skip
        result.status_code = exchange.status_code
        result.upstream_id = upstream_id_of(snapshot_id, index) if index else snapshot_id
        return result

    def cancel(self, upstream_id: str) -> bool:
        """Cancel the snapshot (every sample of the run's trigger it belongs to); True when
        the vendor stopped it. A run cancels each of its samples, so the second sample of a
        snapshot finds it no longer running (400): that is acknowledged when the snapshot
        will deliver nothing more (its progress is not `ready`), not when it finished first.
        An unknown snapshot (404) is declined; any other refusal, or no answer, raises
        (Connector.cancel: the caller records the error and counts it against the circuit)."""
        snapshot_id, _ = split_upstream_id(upstream_id)
        exchange = self._call("POST", f"/snapshot/{snapshot_id}/cancel")
        if exchange.ok:
            return True
        if exchange.status_code == 404:
            return False
        if exchange.status_code != 400:
            raise brightdata_error(exchange)
        progress = self._call("GET", f"/progress/{snapshot_id}")
        if not progress.ok:
            raise brightdata_error(progress)
        status = str(_as_dict(json_body(progress.body)).get("status") or "").lower()
        return bool(status) and status != "ready" and status not in RUNNING

    def lookup(self, idempotency_key: str) -> str | None:
        raise UpstreamError(
            ErrorClass.UNSUPPORTED, "Bright Data takes no client reference to find a snapshot by"
        )

    # --- reading ----------------------------------------------------------------------------
    @classmethod
    def parse(
        cls, raw: bytes, *, content_type: str = "", sample_id: int | None = None
    ) -> NormalizedResult:
        payload = json_body(raw)
        upstream_id: str | None = None
        if isinstance(payload, dict) and payload.get("object") == ENVELOPE_OBJECT:
            mime = ENVELOPE_MIME
            record = _as_dict(payload.get("record"))
            snapshot_id = payload.get("snapshot_id")
            index = payload.get("index")
            if isinstance(snapshot_id, str) and snapshot_id:
                upstream_id = (
                    upstream_id_of(snapshot_id, index) if isinstance(index, int) else snapshot_id
                )
        else:
            mime = content_type or "application/json"
            records = payload if isinstance(payload, list) else [payload]
            record = _as_dict(records[0]) if len(records) == 1 else {}
        if not record:
            message = "not a Bright Data record (one record, or a snapshot of one)"
            return failed(raw, mime, sample_id, error_dict(ErrorClass.PARSE_FAILED, message))
        result = read_record(record, raw, mime, sample_id)
        result.upstream_id = upstream_id
        return result


def read_record(
    record: dict[str, Any], raw: bytes, mime: str, sample_id: int | None
) -> NormalizedResult:
    """One scraped record by the rules in the module docstring."""
    if record.get("error") or record.get("error_code"):
        code = record.get("error_code")
        message = str(record.get("error") or code)[:300]
        return failed(raw, mime, sample_id,
                      error_dict(ErrorClass.UPSTREAM_FAILED, message, code=code))  # fmt: skip
    text = str(record.get("answer_text_markdown") or record.get("answer_text") or "")
    citations = CitationList(len(text))
    for source in map(_as_dict, _as_list(record.get("citations"))):
        if source.get("url"):
            citations.add(str(source["url"]), title=_title(source))
    read = [
        (str(s["url"]), _title(s))
        for s in map(_as_dict, _as_list(record.get("search_sources")))
        if s.get("url")
    ]
    return NormalizedResult.answer(
        raw,
        mime,
        sample_id,
        None,
        text,
        citations=citations.items,
        found=found_sources(citations.items, read),
        search_queries=search_queries(_as_list(record.get("web_search_query"))),
    )


def _title(source: dict[str, Any]) -> str | None:
    title = source.get("title") or source.get("domain")
    return str(title) if title else None


class BrightDataChatGPT(BrightDataConnector):
    """`chatgpt_web`: ChatGPT Search, "Search by Prompt" (the vendor's API reference)."""

    dataset_id = "gd_m7aof0k82r803d5bjm"
    entry_url = "https://chatgpt.com/"
    modes = frozenset({"web_search", "no_search"})

    def input_for(self, request: SampleRequest, index: int) -> dict[str, Any]:
        # `web_search` is a permission, not a guarantee (their "Query fan-out" page): the
        # record's `web_search_triggered` says whether a search ran; it stays in the raw.
        return super().input_for(request, index) | {"web_search": request.mode == "web_search"}


class BrightDataPerplexity(BrightDataConnector):
    """`perplexity_web`: Perplexity (the SDK's PerplexityScraper: dataset and entry URL)."""

    dataset_id = "gd_m7dhdot1vw9a7gc1n"
    entry_url = "https://www.perplexity.ai"


class BrightDataGemini(BrightDataConnector):
    """`gemini_web`: the Gemini app."""

    dataset_id = "gd_mbz66arm2mf9cu856y"
    entry_url = "https://gemini.google.com/"


class BrightDataCopilot(BrightDataConnector):
    """`copilot_web`: Microsoft Copilot."""

    dataset_id = "gd_m7di5jy6s9geokz8w"
    entry_url = "https://copilot.microsoft.com/chats"


class BrightDataAIMode(BrightDataConnector):
    """`google_ai_mode`: Google's AI Mode page."""

    dataset_id = "gd_mcswdt6z2elth3zqr2"
    entry_url = "https://google.com/aimode"
