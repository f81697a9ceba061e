"""Bright Data's Web Scraper API (connectors/adapters/brightdata.py) against the simulator over
HTTP on loopback: one trigger per batch, each sample's record found in the snapshot by its
input index, progress, download, partial snapshots, errors, cancel; and the captured record of
every surface parsed (and `reparse`d) to its reviewed result.

Regenerate the captured fixtures with `python -m tests.connectors.test_brightdata` (simulator
seed 7), then review the diff.
"""

from __future__ import annotations

import json
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings

from connectors.adapters.brightdata import (
    ENVELOPE_MIME,
    BrightDataAIMode,
    BrightDataChatGPT,
    BrightDataConnector,
    BrightDataCopilot,
    BrightDataGemini,
    BrightDataPerplexity,
    split_upstream_id,
)
from connectors.base import ConnectorConfig, ErrorClass, SampleRequest, UpstreamError
from connectors.platforms import PLATFORMS
from connectors.registry import connector_config, get_connector
from geo_collect.settings import platform_settings
from simulator import SimulatorHandle, start_simulator

API_KEY = "bd-test-secret-789"
FIXTURES = Path(__file__).parent / "fixtures" / "brightdata"
SURFACES: dict[str, type[BrightDataConnector]] = {
    "chatgpt_web": BrightDataChatGPT,
    "perplexity_web": BrightDataPerplexity,
    "gemini_web": BrightDataGemini,
    "copilot_web": BrightDataCopilot,
    "google_ai_mode": BrightDataAIMode,
}
QUESTIONS = [
    "Which CRM is best for a small team?",
    "What is the best project management tool for agencies?",
    "Which cloud provider is cheapest for startups?",
]


def connector_for(sim: SimulatorHandle, surface: str, **extra: Any) -> BrightDataConnector:
    config = ConnectorConfig(platform=surface, base_url=sim.url("brightdata"), api_key=API_KEY,
                             extra=extra)  # fmt: skip
    return SURFACES[surface](config)


def ask(question: str, number: int = 1, **target: str) -> SampleRequest:
    fields = {"device": "desktop", "region": "us", "mode": "web_search"} | target
    return SampleRequest(sample_id=number, idempotency_key=f"bd-{number}", question=question,
                         **fields)  # fmt: skip


def logged(sim: SimulatorHandle, surface: str) -> dict[str, dict[str, Any]]:
    """The simulator's answers for the surface, by the upstream id it gave them."""
    return {entry["upstream_id"]: entry for entry in sim.answers(surface)}


def until_ready(connector: BrightDataConnector, upstream_id: str) -> list[str]:
    states = []
    for _ in range(5):
        states.append(connector.poll(upstream_id).state)
        if states[-1] != "running":
            return states
    return states


def paths(sim: SimulatorHandle) -> dict[str, int]:
    found: dict[str, int] = sim.stats()["platforms"]["brightdata"]["paths"]
    return found


# --- the lifecycle ---------------------------------------------------------------------------


@pytest.mark.parametrize("surface", sorted(SURFACES))
def test_a_batch_is_one_trigger_and_each_sample_finds_its_own_record(
    simulator: SimulatorHandle, surface: str
) -> None:
    simulator.configure(profile={"citation_rate": 1.0})
    connector = connector_for(simulator, surface)
    outcomes = connector.submit_batch([ask(q, n) for n, q in enumerate(QUESTIONS, start=1)])

    assert paths(simulator) == {"POST /datasets/v3/trigger": 1}
    ids = [o.upstream_id for o in outcomes if not isinstance(o, UpstreamError)]
    assert len(ids) == 3 and len({split_upstream_id(i)[0] for i in ids}) == 1  # one snapshot
    assert [split_upstream_id(i)[1] for i in ids] == [1, 2, 3]
    assert until_ready(connector, ids[1]) == ["running", "completed"]

    log = logged(simulator, surface)
    for number, upstream_id in enumerate(ids, start=1):
        result = connector.fetch_evidence(upstream_id, sample_id=number)
        wanted = log[upstream_id]
        assert result.collection_state == "completed", result.error
        assert (result.sample_id, result.upstream_id) == (number, upstream_id)
        assert result.answer_text == wanted["answer_text"]
        cited = list(dict.fromkeys(c["url"] for c in wanted["citations"]))
        assert [c.url for c in result.citations] == cited
        assert result.raw_mime == ENVELOPE_MIME
        envelope = json.loads(result.raw)
        assert envelope["record"]["prompt"] == QUESTIONS[number - 1]  # its own record only
        assert API_KEY.encode() not in result.raw
        assert result.cost is None  # the vendor states no cost


def test_found_sources_and_searches_are_read_where_the_scraper_reports_them(
    simulator: SimulatorHandle,
) -> None:
    simulator.configure(profile={"citation_rate": 1.0})
    for surface, has_found, has_searches in (
        ("chatgpt_web", True, False),
        ("perplexity_web", False, True),
        ("copilot_web", False, False),
    ):
        connector = connector_for(simulator, surface)
        [outcome] = connector.submit_batch([ask(QUESTIONS[0])])
        assert not isinstance(outcome, UpstreamError)
        until_ready(connector, outcome.upstream_id)
        result = connector.fetch_evidence(outcome.upstream_id)
        assert [f.url for f in result.found] == (
            ["https://en.wikipedia.org/wiki/Cloud_computing"] if has_found else []
        )
        assert all(f.id.startswith("f") for f in result.found)
        assert result.search_queries == (
            [QUESTIONS[0], f"{QUESTIONS[0]} reviews"] if has_searches else []
        )


def test_chatgpt_asks_without_search_only_when_the_target_says_no_search(
    simulator: SimulatorHandle,
) -> None:
    connector = connector_for(simulator, "chatgpt_web")
    outcomes = connector.submit_batch(
        [ask(QUESTIONS[0], 1), ask(QUESTIONS[1], 2, mode="no_search", region="gb")]
    )
    ids = [o.upstream_id for o in outcomes if not isinstance(o, UpstreamError)]
    until_ready(connector, ids[0])
    inputs = [json.loads(connector.fetch_evidence(i).raw)["record"]["input"] for i in ids]
    assert inputs == [
        {"url": "https://chatgpt.com/", "prompt": QUESTIONS[0], "country": "US", "index": 1,
         "web_search": True},
        {"url": "https://chatgpt.com/", "prompt": QUESTIONS[1], "country": "GB", "index": 2,
         "web_search": False},
    ]  # fmt: skip


def test_a_download_before_the_snapshot_is_ready_is_a_poll_to_try_again(
    simulator: SimulatorHandle,
) -> None:
    connector = connector_for(simulator, "copilot_web")
    simulator.configure(profile={"brightdata": {"running_looks": 5}})
    [outcome] = connector.submit_batch([ask(QUESTIONS[0])])
    assert not isinstance(outcome, UpstreamError)
    with pytest.raises(UpstreamError) as early:
        connector.fetch_evidence(outcome.upstream_id)
    assert early.value.error_class is ErrorClass.POLL_FAILED
    assert early.value.status_code == 202 and "not ready" in early.value.message


def test_a_partial_snapshot_fails_only_the_inputs_that_errored(
    simulator: SimulatorHandle,
) -> None:
    simulator.script({"match": QUESTIONS[1], "fault": "task_failed", "platform": "perplexity_web",
                      "times": None})  # fmt: skip
    connector = connector_for(simulator, "perplexity_web")
    outcomes = connector.submit_batch([ask(q, n) for n, q in enumerate(QUESTIONS, start=1)])
    ids = [o.upstream_id for o in outcomes if not isinstance(o, UpstreamError)]
    assert until_ready(connector, ids[0])[-1] == "completed"

    states = [connector.fetch_evidence(i).collection_state for i in ids]
    assert states == ["completed", "failed", "completed"]
    errored = connector.fetch_evidence(ids[1])
    assert errored.error is not None
    assert errored.error["class"] == ErrorClass.UPSTREAM_FAILED.value
    assert errored.error["code"] == "dead_page"
    assert errored.evidence_state == "failed" and errored.upstream_id == ids[1]


def test_a_failed_snapshot_fails_its_samples_and_a_lost_one_is_lost(
    simulator: SimulatorHandle,
) -> None:
    simulator.script({"match": "trigger", "fault": "task_failed", "platform": "gemini_web",
                      "params": {"snapshot": True}, "times": 1})  # fmt: skip
    connector = connector_for(simulator, "gemini_web")
    [outcome] = connector.submit_batch([ask(QUESTIONS[0])])
    assert not isinstance(outcome, UpstreamError)
    polled = connector.poll(outcome.upstream_id)
    assert (polled.state, polled.message) == ("failed", "Failed to trigger collector")

    simulator.script({"match": QUESTIONS[2], "fault": "lose", "platform": "gemini_web",
                      "times": 1})  # fmt: skip
    [lost] = connector.submit_batch([ask(QUESTIONS[2])])
    assert not isinstance(lost, UpstreamError)
    assert connector.poll(lost.upstream_id).state == "lost"
    with pytest.raises(UpstreamError) as gone:
        connector.fetch_evidence(lost.upstream_id)
    assert gone.value.error_class is ErrorClass.LOST


@pytest.mark.parametrize(
    ("fault", "error_class", "status", "words"),
    [
        ("rate_limit", ErrorClass.RATE_LIMITED, 429, "too many running jobs"),
        ("server_error", ErrorClass.TRANSIENT, 500, "Internal server error"),
        ("auth_error", ErrorClass.AUTH, 401, "Unauthorized"),
    ],
)
def test_a_refused_trigger_is_classified_with_the_vendors_words(
    simulator: SimulatorHandle, fault: str, error_class: ErrorClass, status: int, words: str
) -> None:
    simulator.script({"match": "trigger", "fault": fault, "platform": "copilot_web", "times": 1})
    connector = connector_for(simulator, "copilot_web")
    first, second = connector.submit_batch([ask(QUESTIONS[0]), ask(QUESTIONS[1], 2)])
    assert first is second  # one trigger, one refusal for both
    assert isinstance(first, UpstreamError)
    assert first.error_class is error_class and first.status_code == status
    assert words in first.message
    assert API_KEY not in str(first)


def test_an_unknown_dataset_and_a_bad_input_are_invalid(simulator: SimulatorHandle) -> None:
    unknown = connector_for(simulator, "copilot_web", dataset_id="gd_nosuchdataset")
    with pytest.raises(UpstreamError) as missing:
        unknown.submit(ask(QUESTIONS[0]))
    assert (missing.value.error_class, missing.value.message) == (
        ErrorClass.INVALID, "dataset does not exist"
    )  # fmt: skip
    with pytest.raises(UpstreamError) as empty:
        connector_for(simulator, "copilot_web").submit(ask("   "))
    assert empty.value.error_class is ErrorClass.INVALID
    assert "validation failed" in empty.value.message
    assert "prompt is required" in empty.value.message


def test_a_poll_refused_for_a_while_keeps_the_snapshot(simulator: SimulatorHandle) -> None:
    connector = connector_for(simulator, "perplexity_web")
    [outcome] = connector.submit_batch([ask(QUESTIONS[0])])
    assert not isinstance(outcome, UpstreamError)
    snapshot_id, _ = split_upstream_id(outcome.upstream_id)
    simulator.script({"match": snapshot_id, "fault": "rate_limit", "platform": "brightdata",
                      "times": 1})  # fmt: skip
    with pytest.raises(UpstreamError) as refused:
        connector.poll(outcome.upstream_id)
    assert refused.value.error_class is ErrorClass.POLL_FAILED
    assert until_ready(connector, outcome.upstream_id)[-1] == "completed"


# --- cancel ----------------------------------------------------------------------------------


def test_cancel_stops_a_running_snapshot_and_the_vendor_records_each_request(
    simulator: SimulatorHandle,
) -> None:
    simulator.configure(profile={"brightdata": {"running_looks": 3}})
    connector = connector_for(simulator, "copilot_web")
    outcomes = connector.submit_batch([ask(QUESTIONS[0], 1), ask(QUESTIONS[1], 2)])
    ids = [o.upstream_id for o in outcomes if not isinstance(o, UpstreamError)]
    snapshot_id, _ = split_upstream_id(ids[0])

    assert connector.cancel(ids[0]) is True
    # The same snapshot again (the run's next sample): no longer running, and stopped.
    assert connector.cancel(ids[1]) is True
    assert connector.cancel("s_nosuchsnapshot:1") is False
    polled = connector.poll(ids[1])
    assert polled.state == "failed" and "cancel" in (polled.message or "")

    protocol = simulator.sim.protocol("brightdata")
    assert protocol is not None
    assert protocol.cancels == [  # type: ignore[attr-defined]
        {"snapshot_id": snapshot_id, "outcome": "cancelled"},
        {"snapshot_id": snapshot_id, "outcome": "not_running"},
        {"snapshot_id": "s_nosuchsnapshot", "outcome": "unknown"},
    ]
    events = [e for e in simulator.answers("brightdata") if e.get("event") == "cancel"]
    assert [e["outcome"] for e in events] == ["cancelled", "not_running", "unknown"]
    assert paths(simulator)[f"POST /datasets/v3/snapshot/{snapshot_id}/cancel"] == 2


def test_a_cancel_the_vendor_refuses_raises_so_it_is_recorded_and_counted(
    simulator: SimulatorHandle,
) -> None:
    # Connector.cancel: declined (False) only when the vendor answered that nothing is left
    # to stop; a refusal is an error the caller records and counts against the circuit.
    simulator.configure(profile={"brightdata": {"running_looks": 3}})
    outcome = connector_for(simulator, "copilot_web").submit(ask(QUESTIONS[0]))
    config = ConnectorConfig(platform="copilot_web", base_url=simulator.url("brightdata"),
                             api_key="invalid-key")  # fmt: skip
    with pytest.raises(UpstreamError) as refused:
        BrightDataCopilot(config).cancel(outcome.upstream_id)
    assert refused.value.error_class is ErrorClass.AUTH and refused.value.status_code == 401


def test_runs_never_share_a_snapshot_so_one_runs_cancel_spares_the_other(
    simulator: SimulatorHandle,
) -> None:
    simulator.configure(profile={"brightdata": {"running_looks": 2}})
    connector = connector_for(simulator, "perplexity_web")
    keys = ["run-a:11:1", "run-b:12:1", "run-a:13:1"]
    requests = [
        SampleRequest(sample_id=n, idempotency_key=key, question=QUESTIONS[n], device="desktop",
                      region="us", mode="web_search")
        for n, key in enumerate(keys)
    ]  # fmt: skip
    outcomes = connector.submit_batch(requests)
    ids = [o.upstream_id for o in outcomes if not isinstance(o, UpstreamError)]
    assert paths(simulator)["POST /datasets/v3/trigger"] == 2
    snapshots = [split_upstream_id(i) for i in ids]
    assert snapshots[0][0] == snapshots[2][0] != snapshots[1][0]
    assert [index for _, index in snapshots] == [1, 1, 2]  # the index within its own trigger

    assert connector.cancel(ids[0]) is True  # run a's snapshot
    assert connector.poll(ids[2]).state == "failed"
    assert until_ready(connector, ids[1])[-1] == "completed"  # run b's goes on
    assert connector.fetch_evidence(ids[1]).answer_text


def test_one_runs_refused_trigger_is_only_its_own_requests_error(
    simulator: SimulatorHandle,
) -> None:
    simulator.script({"match": QUESTIONS[1], "fault": "rate_limit", "platform": "gemini_web",
                      "times": 1})  # fmt: skip
    connector = connector_for(simulator, "gemini_web")
    requests = [
        SampleRequest(sample_id=n, idempotency_key=f"run-{n}:{n}:1", question=QUESTIONS[n],
                      device="desktop", region="us", mode="web_search")
        for n in range(2)
    ]  # fmt: skip
    accepted, refused = connector.submit_batch(requests)
    assert not isinstance(accepted, UpstreamError)
    assert isinstance(refused, UpstreamError) and refused.error_class is ErrorClass.RATE_LIMITED


def test_a_finished_snapshot_is_not_cancelled(simulator: SimulatorHandle) -> None:
    connector = connector_for(simulator, "perplexity_web")
    [outcome] = connector.submit_batch([ask(QUESTIONS[0])])
    assert not isinstance(outcome, UpstreamError)
    until_ready(connector, outcome.upstream_id)
    assert connector.cancel(outcome.upstream_id) is False


# --- what the connector declares ---------------------------------------------------------


def test_capabilities_and_no_lookup(simulator: SimulatorHandle) -> None:
    for surface in SURFACES:
        capabilities = connector_for(simulator, surface).capabilities()
        assert capabilities.asynchronous and not capabilities.supports_lookup
        assert capabilities.devices == {"desktop"} and capabilities.languages == set()
        assert capabilities.problems(device="desktop", region="de", mode="web_search",
                                     screenshot_policy="none") == []  # fmt: skip
        assert PLATFORMS[surface].vendors["brightdata"].endswith(SURFACES[surface].__name__)
    chatgpt = connector_for(simulator, "chatgpt_web").capabilities()
    assert chatgpt.modes == {"web_search", "no_search"}
    assert connector_for(simulator, "gemini_web").capabilities().modes == {"web_search"}
    narrowed = connector_for(simulator, "copilot_web", regions=["us"]).capabilities()
    assert narrowed.regions == {"us"}
    with pytest.raises(UpstreamError) as cannot:
        connector_for(simulator, "copilot_web").lookup("bd-1")
    assert cannot.value.error_class is ErrorClass.UNSUPPORTED


def test_the_account_key_serves_every_surface_and_a_surface_may_name_its_scraper() -> None:
    given = platform_settings(
        {"GEO_BRIGHTDATA_API_KEY": "bd-account-key",
         "GEO_PERPLEXITY_WEB_EXTRA": '{"dataset_id": "gd_perplexity_custom"}',
         "GEO_GEMINI_WEB_VENDOR": "brightdata"}
    )  # fmt: skip
    with override_settings(GEO_PLATFORMS=given, GEO_UPSTREAM_BASE_URL=""):
        for surface in ("copilot_web", "perplexity_web", "gemini_web"):
            config = connector_config(surface)
            assert (config.api_key, config.base_url) == ("bd-account-key",
                                                         "https://api.brightdata.com")  # fmt: skip
        assert isinstance(get_connector("gemini_web"), BrightDataGemini)
        perplexity = get_connector("perplexity_web")
        assert isinstance(perplexity, BrightDataPerplexity)
        assert perplexity.dataset == "gd_perplexity_custom"
        assert get_connector("copilot_web").dataset == BrightDataCopilot.dataset_id
        assert "bd-account-key" not in repr(connector_config("copilot_web"))
    with override_settings(GEO_PLATFORMS={}, GEO_UPSTREAM_BASE_URL="http://sim:1"):
        assert connector_config("copilot_web").base_url == "http://sim:1/brightdata"


# --- captured records: parse and reparse -------------------------------------------------

CAPTURED = sorted(FIXTURES.glob("*/*.expected.json"))


def _transcript(expected: Path) -> Path:
    return expected.with_name(expected.name.removesuffix(".expected.json") + ".json")


@pytest.mark.parametrize("expected", CAPTURED, ids=[f"{p.parent.name}/{p.name}" for p in CAPTURED])
def test_reparse_of_a_captured_record_gives_the_reviewed_result(expected: Path) -> None:
    surface = expected.parent.name
    transcript = _transcript(expected)
    out = StringIO()
    with override_settings(GEO_PLATFORMS={surface: {"VENDOR": "brightdata"}}):
        call_command("reparse", str(transcript), platform=surface, stdout=out)
    printed = json.loads(out.getvalue())
    reviewed = json.loads(expected.read_text(encoding="utf-8"))
    assert printed == reviewed
    parsed = SURFACES[surface].parse(transcript.read_bytes())
    assert parsed.raw == transcript.read_bytes()


def test_every_surface_has_captured_records() -> None:
    captured = {(p.parent.name, p.name.removesuffix(".expected.json")) for p in CAPTURED}
    assert {surface for surface, _ in captured} == set(SURFACES)
    assert ("perplexity_web", "errored") in captured  # a failed input of a partial snapshot


def test_a_downloaded_snapshot_of_one_record_parses_as_that_record() -> None:
    captured = _transcript(FIXTURES / "copilot_web" / "record.expected.json")
    envelope = json.loads(captured.read_text(encoding="utf-8"))
    snapshot = json.dumps([envelope["record"]]).encode()
    result = BrightDataCopilot.parse(snapshot)
    assert result.collection_state == "completed" and result.answer_text
    assert result.upstream_id is None and result.raw_mime == "application/json"
    two = json.dumps([envelope["record"], envelope["record"]]).encode()
    assert BrightDataCopilot.parse(two).error == {
        "class": "parse_failed",
        "message": "not a Bright Data record (one record, or a snapshot of one)",
    }


def capture(handle: SimulatorHandle) -> None:
    """Write every surface's captured record and its `reparse` printout (the regeneration)."""
    from evidence.management.commands.reparse import printable

    handle.configure(seed=7, profile={"citation_rate": 1.0, "cjk_rate": 0.0, "emoji_rate": 0.0})
    handle.script({"match": "Which CRM is worst?", "fault": "task_failed",
                   "platform": "perplexity_web", "times": None})  # fmt: skip
    for surface in SURFACES:
        connector = connector_for(handle, surface)
        asked = [ask(QUESTIONS[0])]
        if surface == "perplexity_web":
            asked.append(ask("Which CRM is worst?", 2))
        outcomes = connector.submit_batch(asked)
        names = ["record", "errored"]
        for name, outcome in zip(names, outcomes, strict=False):
            assert not isinstance(outcome, UpstreamError)
            until_ready(connector, outcome.upstream_id)
            result = connector.fetch_evidence(outcome.upstream_id)
            folder = FIXTURES / surface
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{name}.json").write_bytes(result.raw)
            reparsed = printable(SURFACES[surface].parse(result.raw))
            text = json.dumps(reparsed, ensure_ascii=False, indent=2) + "\n"
            (folder / f"{name}.expected.json").write_text(text, encoding="utf-8")


if __name__ == "__main__":  # python -m tests.connectors.test_brightdata
    import django

    django.setup()
    with start_simulator(seed=7) as sim:
        capture(sim)
    sys.exit(0)
