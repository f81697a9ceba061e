"""Bright Data's Web Scraper API for its AI scrapers, as connectors/adapters/brightdata.py reads
it (docs.brightdata.com: "Trigger a collection", "Monitor progress", "Download snapshot",
"Cancel snapshot", "Error codes by endpoint", the ChatGPT "Search by Prompt" reference; the
official `brightdata-sdk` parses every shape here in tests/fidelity/test_brightdata_sdk.py).

Served under `/brightdata/`: one host for every scraper, as the real one. The `dataset_id`
names the surface (the draws, the answer log and a scripted fault's `platform` use it):
chatgpt_web, perplexity_web, gemini_web, copilot_web, google_ai_mode.

    POST /datasets/v3/trigger?dataset_id=D[&include_errors=true]
         a JSON array of inputs (or {"input": [...]}); each must name the scraper's page as
         `url` and a non-empty `prompt` (400 {"validation_errors": [...]} otherwise); 404
         "dataset does not exist"; -> 200 {"snapshot_id": "s_..."}
    GET  /datasets/v3/progress/{id} -> {"snapshot_id", "dataset_id", "status"}: "running" for
         the first `running_looks` looks, then "ready"; "failed" with `error_message` for a
         failed or cancelled snapshot; 404 "Snapshot does not exist"
    GET  /datasets/v3/snapshot/{id}?format=json|ndjson -> 202 {"status": "running", "message":
         "Snapshot is not ready yet, try again in 10s"} until ready, then 200 the records;
         400 "Snapshot is empty" (every input errored and include_errors was false)
    POST /datasets/v3/snapshot/{id}/cancel -> 200 text/plain "OK" while it runs; 400
         "Snapshot is not running"; 404. Every cancel request is recorded (`cancels`, and a
         `cancel` entry in the answer log under "brightdata") so a test can assert it.

A look is a progress call or a download (time passes for the snapshot either way). Records:
one per input, its `index` and `input` echoed; an input drawn `task_failed` is an error record
({"input", "index", "error", "error_code": "dead_page"}): a partial snapshot. A trigger drawn
`task_failed` with param `snapshot: true` fails the whole snapshot; any input drawn `lose`
makes the snapshot unknown afterwards (404). HTTP faults: `rate_limit` 429 "You have too many
running jobs for this dataset..." (no retry hint), `server_error` / `overloaded` 500 "Internal
server error", `auth_error` 401, `hang` (on trigger: the snapshot is created, the answer never
comes). A missing or `invalid…` bearer token is 401 "Unauthorized".

None of these endpoints states a cost; neither does the simulator. Profile
`"brightdata": {"running_looks": 1}`.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlsplit

from ..content import UNCITED_SOURCE, SimAnswer, searches_for
from ..faults import HTTP_FAULTS, Draw
from ..protocol import PlatformProtocol, SimRequest, SimResponse

API = "/datasets/v3"
INPUT_FAULTS = frozenset({"task_failed", "lose"})
TRIGGER_FAULTS = HTTP_FAULTS | frozenset({"task_failed"})
TOO_MANY_JOBS = (
    "You have too many running jobs for this dataset. Please wait until some of them finish or "
    "consider combining multiple inputs into a single request. Running jobs: 100>=100"
)
DEFAULTS = {"running_looks": 1}


@dataclass(frozen=True)
class Scraper:
    surface: str
    entry_url: str
    model: str | None = None


# dataset_id -> the scraper it collects with (the vendor's dataset ids and input `url`s).
SCRAPERS: dict[str, Scraper] = {
    "gd_m7aof0k82r803d5bjm": Scraper("chatgpt_web", "https://chatgpt.com/", "gpt-4o"),
    "gd_m7dhdot1vw9a7gc1n": Scraper("perplexity_web", "https://www.perplexity.ai"),
    "gd_mbz66arm2mf9cu856y": Scraper("gemini_web", "https://gemini.google.com/"),
    "gd_m7di5jy6s9geokz8w": Scraper("copilot_web", "https://copilot.microsoft.com/chats"),
    "gd_mcswdt6z2elth3zqr2": Scraper("google_ai_mode", "https://google.com/aimode"),
}


@dataclass
class _Snapshot:
    snapshot_id: str
    dataset_id: str
    records: list[dict[str, Any]]
    include_errors: bool
    looks: int = 0
    status: str = "running"  # running -> ready | failed
    error_message: str = ""
    lost: bool = False
    created: str = field(default_factory=lambda: datetime.now(UTC).isoformat())


def _text(status: int, message: str) -> SimResponse:
    return SimResponse(status, {"Content-Type": "text/plain; charset=utf-8"}, message.encode())


def _domain(url: str) -> str:
    return urlsplit(url).hostname or ""


class BrightDataProtocol(PlatformProtocol):
    name = "brightdata"
    faults = HTTP_FAULTS

    def __init__(self, sim: Any) -> None:
        super().__init__(sim)
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.snapshots: dict[str, _Snapshot] = {}
            self.cancels: list[dict[str, Any]] = []
            self._serial = 0

    def _settings(self) -> dict[str, Any]:
        given = self.sim.platform_profile(self.name).get("brightdata")
        return DEFAULTS | (given if isinstance(given, dict) else {})

    def _new_id(self) -> str:
        """A snapshot id shaped like the vendor's (`s_` and 17 base-36 characters, e.g. the
        docs' `s_m4x7enmven8djfqak`), distinct per trigger and stable per run of the tests."""
        with self._lock:
            self._serial += 1
            serial = self._serial
        digest = hashlib.sha256(f"brightdata-snapshot-{serial}".encode()).digest()
        number = int.from_bytes(digest[:12], "big") % 36**17
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"
        encoded = ""
        for _ in range(17):
            number, rest = divmod(number, 36)
            encoded = digits[rest] + encoded
        return "s_" + encoded

    # --- the vendor's shapes of the shared faults -----------------------------------------
    def rate_limited(self, draw: Draw) -> SimResponse:
        return _text(429, TOO_MANY_JOBS)

    def server_error(self, draw: Draw, *, overloaded: bool = False) -> SimResponse:
        return _text(int(draw.params.get("status", 500)), "Internal server error")

    def auth_error(self, draw: Draw) -> SimResponse:
        return _text(401, "Unauthorized")

    # --- routes -----------------------------------------------------------------------------
    def handle(self, request: SimRequest) -> SimResponse:
        token = request.bearer()
        if not token or token.startswith("invalid"):
            return _text(401, "Unauthorized")
        if not request.path.startswith(API + "/"):
            return _text(404, "Not found")
        parts = request.path[len(API) + 1 :].split("/")
        params = {key: values[-1] for key, values in request.query.items() if values}
        match (request.method, *parts):
            case ("POST", "trigger"):
                return self.trigger(request, params)
            case ("GET", "progress", snapshot_id):
                return self.progress(snapshot_id)
            case ("GET", "snapshot", snapshot_id):
                return self.download(snapshot_id, params)
            case ("POST", "snapshot", snapshot_id, "cancel"):
                return self.cancel(snapshot_id)
        return _text(404, "Not found")

    def trigger(self, request: SimRequest, params: dict[str, str]) -> SimResponse:
        scraper = SCRAPERS.get(params.get("dataset_id", ""))
        if scraper is None:
            return _text(404, "dataset does not exist")
        body = request.json()
        inputs = body.get("input") if isinstance(body, dict) else body
        if not isinstance(inputs, list) or not inputs:
            return _text(400, "No data to trigger")
        problems = _validation_errors(inputs, scraper)
        if problems:
            return SimResponse.json(400, {"validation_errors": problems})
        prompts = "\n".join(str(i["prompt"]) for i in inputs)
        draw = self.sim.draw(scraper.surface, "trigger\n" + prompts, TRIGGER_FAULTS)
        if draw.fault != "hang" and (failure := self.http_fault(draw)) is not None:
            return self._respond(failure, {}, draw)
        snapshot_id = self._new_id()
        include_errors = params.get("include_errors", "true").lower() != "false"
        records = [self._record(scraper, snapshot_id, spec, n) for n, spec in enumerate(inputs)]
        snapshot = _Snapshot(snapshot_id, params["dataset_id"], records, include_errors)
        snapshot.lost = any(r.pop("_lost", False) for r in records)
        if draw.fault == "task_failed" and draw.params.get("snapshot"):
            snapshot.status, snapshot.error_message = "failed", "Failed to trigger collector"
        with self._lock:
            self.snapshots[snapshot_id] = snapshot
        if draw.fault == "hang":  # collecting, but the trigger's answer never arrives
            return SimResponse(200, hang_seconds=float(draw.profile["hang_seconds"]))
        return self._respond(SimResponse.json(200, {"snapshot_id": snapshot_id}), {}, draw)

    def _record(
        self, scraper: Scraper, snapshot_id: str, spec: dict[str, Any], position: int
    ) -> dict[str, Any]:
        prompt = str(spec["prompt"])
        index = spec.get("index")
        draw = self.sim.draw(scraper.surface, prompt, INPUT_FAULTS)
        upstream_id = f"{snapshot_id}:{index if index is not None else position + 1}"
        country = str(spec.get("country") or "")
        echoed = {"input": dict(spec), "index": index}
        if draw.fault == "task_failed":
            self.sim.record_answer(scraper.surface, prompt, draw, SimAnswer(),
                                   upstream_id=upstream_id, failed=True)  # fmt: skip
            return echoed | {
                "error": "The page could not be loaded: the answer never appeared",
                "error_code": "dead_page",
                "timestamp": datetime.now(UTC).isoformat(),
            }
        answer = self.sim.answer_for(prompt, draw)
        self.sim.record_answer(scraper.surface, prompt, draw, answer, upstream_id=upstream_id)
        record = echoed | _answer_fields(scraper, prompt, answer, country)
        if draw.fault == "lose":
            record["_lost"] = True
        return record

    def _look(self, snapshot_id: str) -> _Snapshot | None:
        """The snapshot after one more look at it (it becomes ready after `running_looks`)."""
        with self._lock:
            snapshot = self.snapshots.get(snapshot_id)
            if snapshot is None or snapshot.lost:
                return None
            snapshot.looks += 1
            if snapshot.status == "running" and snapshot.looks > int(
                self._settings()["running_looks"]
            ):
                snapshot.status = "ready"
            return snapshot

    def progress(self, snapshot_id: str) -> SimResponse:
        draw = self.sim.draw(self.name, "progress\n" + snapshot_id, HTTP_FAULTS)
        if (failure := self.http_fault(draw)) is not None:
            return self._respond(failure, {}, draw)
        snapshot = self._look(snapshot_id)
        if snapshot is None:
            return _text(404, "Snapshot does not exist")
        body: dict[str, Any] = {
            "snapshot_id": snapshot_id,
            "dataset_id": snapshot.dataset_id,
            "status": snapshot.status,
        }
        if snapshot.status == "failed":
            body["error_message"] = snapshot.error_message
        return self._respond(SimResponse.json(200, body), {}, draw)

    def download(self, snapshot_id: str, params: dict[str, str]) -> SimResponse:
        draw = self.sim.draw(self.name, "snapshot\n" + snapshot_id, HTTP_FAULTS)
        if (failure := self.http_fault(draw)) is not None:
            return self._respond(failure, {}, draw)
        snapshot = self._look(snapshot_id)
        if snapshot is None:
            return _text(404, "Snapshot does not exist")
        if snapshot.status == "running":
            message = "Snapshot is not ready yet, try again in 10s"
            return SimResponse.json(202, {"status": "running", "message": message})
        if snapshot.status == "failed":
            return SimResponse.json(400, {"error": snapshot.error_message or "Snapshot failed"})
        records = [r for r in snapshot.records if snapshot.include_errors or "error" not in r]
        if not records:
            return _text(400, "Snapshot is empty")
        if params.get("format", "json") in ("ndjson", "jsonl"):
            lines = "\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\n"
            return SimResponse(200, {"Content-Type": "application/x-ndjson"}, lines.encode())
        return self._respond(SimResponse.json(200, records), {}, draw)

    def cancel(self, snapshot_id: str) -> SimResponse:
        draw = self.sim.draw(self.name, "cancel\n" + snapshot_id, HTTP_FAULTS)
        failure = self.http_fault(draw)
        with self._lock:
            snapshot = self.snapshots.get(snapshot_id)
            if failure is not None:
                outcome, response = "refused", failure
            elif snapshot is None or snapshot.lost:
                outcome, response = "unknown", _text(404, "Snapshot does not exist")
            elif snapshot.status != "running":
                outcome, response = "not_running", _text(400, "Snapshot is not running")
            else:
                snapshot.status = "failed"
                snapshot.error_message = "Snapshot was cancelled"
                outcome, response = "cancelled", _text(200, "OK")
            self.cancels.append({"snapshot_id": snapshot_id, "outcome": outcome})
        self.sim.record_answer(self.name, "", draw, SimAnswer(), event="cancel",
                               snapshot_id=snapshot_id, outcome=outcome)  # fmt: skip
        return self._respond(response, {}, draw)


def _validation_errors(inputs: list[Any], scraper: Scraper) -> list[str]:
    problems: list[str] = []
    for number, spec in enumerate(inputs):
        if not isinstance(spec, dict):
            problems.append(f"input {number}: not an object")
            continue
        # The docs write the page with its trailing slash, the official SDK without
        # ("https://chatgpt.com"): both name the same page.
        if str(spec.get("url") or "").rstrip("/") != scraper.entry_url.rstrip("/"):
            problems.append(f"input {number}: url must be {scraper.entry_url}")
        if not isinstance(spec.get("prompt"), str) or not spec["prompt"].strip():
            problems.append(f"input {number}: prompt is required")
    return problems


def _answer_fields(
    scraper: Scraper, prompt: str, answer: SimAnswer, country: str
) -> dict[str, Any]:
    """A scraped answer's record: the text (plain and markdown), the sources the answer cites
    (`citations`, in order, numbered by `position`) and, where the scraper reports them, the
    sources its search read (`search_sources`: the cited ones and one it did not cite) and the
    searches it ran (`web_search_query`, Perplexity)."""
    cited: list[dict[str, Any]] = []
    for citation in answer.citations:
        if all(c["url"] != citation.url for c in cited):
            cited.append({"title": citation.title, "url": citation.url,
                          "domain": _domain(citation.url), "position": len(cited) + 1})  # fmt: skip
    record: dict[str, Any] = {
        "url": f"{scraper.entry_url.rstrip('/')}/?q={quote(prompt)}",
        "prompt": prompt,
        "answer_text": answer.text,
        "answer_text_markdown": answer.text,
        "citations": cited,
        "country": country.lower(),
        "timestamp": datetime.now(UTC).isoformat(),
    }
    if scraper.surface == "chatgpt_web":
        record |= {
            "model": scraper.model,
            "web_search_triggered": bool(cited),
            "search_sources": [{"url": c["url"], "title": c["title"]} for c in cited]
            + [{"url": UNCITED_SOURCE[0], "title": UNCITED_SOURCE[1]}],
            "links_attached": [],
        }
    if scraper.surface == "perplexity_web":
        record |= {"web_search_query": searches_for(prompt), "suggested_followup": []}
    return record
