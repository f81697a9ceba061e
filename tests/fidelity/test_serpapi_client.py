"""SerpApi: the official `google-search-results` client (`serpapi.GoogleSearch`) against our
adapter, for Google AI Mode and Google AI Overviews, over the whole asynchronous lifecycle.

The client can be pointed at the simulator: its `BACKEND` class attribute is the base URL. It
speaks `requests`, so its exchanges are recorded on loopback (harness.recording_requests) and
replayed to our connector's submit, poll and fetch_evidence, request for request. The client
only parses JSON into a dict, so what it "exposes" is that dict: the adapter's answer must be
the client's `text_blocks`, its citations the client's `references` those blocks point at, its
ids and error messages the client's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from serpapi import GoogleSearch

from connectors.adapters.serpapi import (
    DEFERRED_AI_OVERVIEW,
    NO_AI_OVERVIEW,
    SerpApiAIMode,
    SerpApiAIOverview,
    SerpApiConnector,
)
from connectors.base import ConnectorConfig, ErrorClass, SampleRequest, UpstreamError
from connectors.platforms import PLATFORMS, VENDORS
from connectors.transport import HttpTransport
from simulator import SimulatorHandle

from .harness import API_KEY, Exchange, ReplayAdapter, recording_requests

QUESTION = "Which CRM is best for a small team?"


def test_serpapi_is_a_vendor_of_both_google_surfaces() -> None:
    """The simulator serves it under /serpapi/ (one host, as the real one), and a deployment
    may choose it for either surface (GEO_<SURFACE>_VENDOR=serpapi)."""
    assert "serpapi" in VENDORS
    assert PLATFORMS["google_ai_mode"].vendors["serpapi"].endswith(":SerpApiAIMode")
    assert PLATFORMS["google_ai_overview"].vendors["serpapi"].endswith(":SerpApiAIOverview")


@dataclass(frozen=True)
class Case:
    name: str
    surface: str  # google_ai_mode | google_ai_overview
    fault: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    overview: str = "inline"  # inline | deferred | absent (AI Overview only)
    region: str = "de"


CASES = [
    Case("ai_mode", "google_ai_mode"),
    Case("ai_mode_gb_mobile", "google_ai_mode", region="gb"),
    Case("overview_inline", "google_ai_overview"),
    Case("overview_deferred", "google_ai_overview", overview="deferred"),
    Case("overview_absent", "google_ai_overview", overview="absent"),
    Case("rate_limit", "google_ai_mode", fault="rate_limit"),
    Case("out_of_searches", "google_ai_overview", fault="rate_limit", params={"quota": True}),
    Case("auth", "google_ai_mode", fault="auth_error"),
    Case("server_error", "google_ai_overview", fault="server_error"),
    Case("search_failed", "google_ai_mode", fault="task_failed"),
    Case("expired", "google_ai_overview", fault="lose"),
]
CLASSES: dict[str, type[SerpApiConnector]] = {
    "google_ai_mode": SerpApiAIMode,
    "google_ai_overview": SerpApiAIOverview,
}


def prepare(sim: SimulatorHandle, case: Case) -> None:
    sim.reset()
    rates = {"inline": (0.0, 0.0), "deferred": (1.0, 0.0), "absent": (0.0, 1.0)}[case.overview]
    serpapi = {"processing_looks": 1, "deferred_overview_rate": rates[0],
               "absent_overview_rate": rates[1]}  # fmt: skip
    sim.configure(seed=17, profile={"citation_rate": 1.0, "cjk_rate": 0.0, "serpapi": serpapi})
    if case.fault:
        sim.script({"match": QUESTION, "fault": case.fault, "platform": case.surface,
                    "params": case.params, "times": None})  # fmt: skip


def sample_request(case: Case) -> SampleRequest:
    device = "mobile" if case.name.endswith("mobile") else "desktop"
    return SampleRequest(sample_id=1, idempotency_key=f"fidelity-{case.name}", question=QUESTION,
                         device=device, region=case.region, mode="web_search")  # fmt: skip


def config_for(case: Case, sim: SimulatorHandle) -> ConnectorConfig:
    return ConnectorConfig(
        platform=case.surface, base_url=sim.url("serpapi"), api_key=API_KEY, model=case.surface
    )


def connector(case: Case, sim: SimulatorHandle, exchanges: list[Exchange]) -> SerpApiConnector:
    config = config_for(case, sim)
    ours = CLASSES[case.surface](config)
    session = requests.Session()
    session.mount("http://", ReplayAdapter(exchanges))
    ours.transport = HttpTransport(config, session=session)
    return ours


@dataclass
class ClientView:
    """What the official client returned, call by call."""

    search: dict[str, Any] = field(default_factory=dict)
    looks: list[dict[str, Any]] = field(default_factory=list)
    overview: dict[str, Any] | None = None  # the google_ai_overview follow-up
    error: Exception | None = None

    @property
    def final(self) -> dict[str, Any]:
        return self.looks[-1] if self.looks else self.search


def client_lifecycle(sim: SimulatorHandle, case: Case, ours: SerpApiConnector) -> ClientView:
    """The documented flow with the client: search (async), look in the archive until it is
    no longer Processing, look once more (our fetch), and for a deferred overview fetch it
    with its page_token."""

    class SimSearch(GoogleSearch):  # type: ignore[misc]
        BACKEND = sim.url("serpapi")

    params = ours.search_params(sample_request(case)) | {"api_key": API_KEY}
    view = ClientView()
    client = SimSearch(dict(params))
    view.search = client.get_dict()
    search_id = view.search.get("search_metadata", {}).get("id")
    if not search_id:
        return view
    for _ in range(5):
        look = client.get_search_archive(search_id)  # a 404 / 410 is JSON too
        view.looks.append(look)
        if look.get("search_metadata", {}).get("status") != "Processing":
            break
    if view.looks and view.looks[-1].get("search_metadata", {}).get("status") == "Success":
        view.looks.append(client.get_search_archive(search_id))  # what fetch_evidence reads
        token = (view.final.get("ai_overview") or {}).get("page_token")
        if token and case.surface == "google_ai_overview":
            follow = SimSearch({"engine": "google_ai_overview", "page_token": token,
                                "api_key": API_KEY})  # fmt: skip
            view.overview = follow.get_dict()
    return view


def our_lifecycle(case: Case, ours: SerpApiConnector) -> dict[str, Any]:
    """submit, poll until not running, fetch_evidence: what our connector said at each step."""
    seen: dict[str, Any] = {"polls": []}
    try:
        outcome = ours.submit(sample_request(case))
    except UpstreamError as error:
        seen["submit_error"] = error
        return seen
    seen["upstream_id"] = outcome.upstream_id
    for _ in range(5):
        state = ours.poll(outcome.upstream_id)
        seen["polls"].append(state)
        if state.state not in ("queued", "running"):
            break
    if seen["polls"][-1].state == "completed":
        seen["result"] = ours.fetch_evidence(outcome.upstream_id, sample_id=1)
    return seen


def query_of(exchange: Exchange) -> dict[str, str]:
    query = {k: v[-1] for k, v in parse_qs(urlsplit(exchange.url).query).items()}
    query.pop("source", None)  # the client names itself ("python")
    return query


def expected_answer(holder: dict[str, Any]) -> tuple[list[str], list[tuple[str, str | None]]]:
    """From the client's dict: every block's text, and the cited references in block order."""
    references = {r["index"]: r for r in holder.get("references", [])}
    texts: list[str] = []
    cited: list[tuple[str, str | None]] = []
    for block in holder.get("text_blocks", []):
        for part in [block, *block.get("list", [])]:
            text = part.get("snippet") or part.get("title")
            if text:
                texts.append(text)
            for index in part.get("reference_indexes", []):
                cited.append((references[index]["link"], references[index].get("title")))
    return texts, cited


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_serpapi_client_and_adapter_agree(
    sim: SimulatorHandle, case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepare(sim, case)
    probe = CLASSES[case.surface](config_for(case, sim))
    with recording_requests(monkeypatch) as exchanges:
        client = client_lifecycle(sim, case, probe)
    ours = connector(case, sim, exchanges)
    seen = our_lifecycle(case, ours)
    replay = ours.transport.session.get_adapter("http://x")  # type: ignore[attr-defined]
    assert isinstance(replay, ReplayAdapter) and not replay.pending, "an exchange left unread"
    # Request side: every call we made asks what the client asked, the key as SerpApi takes it.
    for sent, exchange in zip(replay.sent, exchanges, strict=True):
        assert urlsplit(str(sent.url)).path == urlsplit(exchange.url).path
        ours_query = {k: v[-1] for k, v in parse_qs(urlsplit(str(sent.url)).query).items()}
        theirs = query_of(exchange)
        if urlsplit(exchange.url).path.startswith("/serpapi/searches/"):
            # The client repeats its whole search on archive calls; the Search Archive API
            # takes the id (in the path), `api_key` and `output` only.
            theirs = {k: v for k, v in theirs.items() if k in ("api_key", "output")}
        assert ours_query == theirs
        assert ours_query["api_key"] == API_KEY
    CHECKS[case.fault or "answer"](case, client, seen)


def check_answer(case: Case, client: ClientView, seen: dict[str, Any]) -> None:
    assert client.search["search_metadata"]["status"] == "Processing"
    assert [p.state for p in seen["polls"]] == ["running", "completed"]
    assert seen["upstream_id"] == client.search["search_metadata"]["id"]
    result = seen["result"]
    assert result.collection_state == "completed", result.error
    assert result.upstream_id == client.final["search_metadata"]["id"]
    if case.surface == "google_ai_mode":
        holder = client.final
    elif case.overview == "absent":
        assert "ai_overview" not in client.final
        assert result.answer_text == "" and result.citations == []
        assert NO_AI_OVERVIEW in result.warnings
        return
    elif case.overview == "deferred":
        assert set(client.final["ai_overview"]) == {"page_token", "serpapi_link"}
        assert client.overview is not None
        holder = client.overview["ai_overview"]
        assert DEFERRED_AI_OVERVIEW in result.warnings
    else:
        holder = client.final["ai_overview"]
    texts, cited = expected_answer(holder)
    assert texts and cited, "an answer without citations proves nothing"
    assert result.answer_text == "\n\n".join(texts)
    assert [(c.url, c.title) for c in result.citations] == cited
    for citation in result.citations:  # each citation spans the block that cites it
        assert citation.start is not None and citation.end is not None
        assert result.answer_text[citation.start : citation.end] in texts
    # A reference no block points at was shown but not cited: found, not a citation.
    listed = [(r["link"], r.get("title")) for r in holder["references"]]
    uncited = [(link, title) for link, title in listed if link not in {u for u, _ in cited}]
    assert uncited and [(f.url, f.title) for f in result.found] == uncited
    assert result.search_queries == []  # SerpApi documents no searches for these engines
    assert API_KEY.encode() not in result.raw  # the key never reaches evidence


def check_refused(case: Case, client: ClientView, seen: dict[str, Any]) -> None:
    error = seen["submit_error"]
    expected = {
        "rate_limit": ErrorClass.AUTH if case.params.get("quota") else ErrorClass.RATE_LIMITED,
        "auth_error": ErrorClass.AUTH,
        "server_error": ErrorClass.TRANSIENT,
    }[str(case.fault)]
    assert error.error_class is expected
    assert error.message == client.search["error"]  # the client's dict holds the same message
    assert error.retry_after is None  # SerpApi documents no hint; neither side invents one


def check_search_failed(case: Case, client: ClientView, seen: dict[str, Any]) -> None:
    assert client.final["search_metadata"]["status"] == "Error"
    assert seen["polls"][-1].state == "failed"
    assert seen["polls"][-1].message == client.final["error"]


def check_expired(case: Case, client: ClientView, seen: dict[str, Any]) -> None:
    assert "expired" in client.final["error"]
    assert seen["polls"][-1].state == "lost"
    assert seen["polls"][-1].message == client.final["error"]


CHECKS = {
    "answer": check_answer,
    "rate_limit": check_refused,
    "auth_error": check_refused,
    "server_error": check_refused,
    "task_failed": check_search_failed,
    "lose": check_expired,
}


def test_a_captured_search_reparses_to_the_same_answer(
    sim: SimulatorHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`reparse` reads the stored envelope, and also a search JSON saved on its own."""
    case = CASES[0]
    prepare(sim, case)
    probe = SerpApiAIMode(config_for(case, sim))
    with recording_requests(monkeypatch) as exchanges:
        client = client_lifecycle(sim, case, probe)
    result = our_lifecycle(case, connector(case, sim, exchanges))["result"]
    again = SerpApiAIMode.parse(result.raw, content_type=result.raw_mime)
    assert (again.answer_text, again.citations) == (result.answer_text, result.citations)
    alone = SerpApiAIMode.parse(exchanges[-1].body, content_type="application/json")
    assert (alone.answer_text, alone.citations) == (result.answer_text, result.citations)
    assert alone.upstream_id == client.final["search_metadata"]["id"]
