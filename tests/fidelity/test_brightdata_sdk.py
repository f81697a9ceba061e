"""Bright Data: the official `brightdata-sdk` (2.5.2) against our adapter, on the simulator.

The SDK takes no base URL: its Datasets API client (`DatasetAPIClient`) holds the endpoints'
full URLs as class attributes (TRIGGER_URL, STATUS_URL, RESULT_URL, `https://api.brightdata.com
/datasets/v3/...`). Each test points one client instance at the simulator by setting those
attributes on the instance, the only change; everything it sends and parses is its own code
(trigger, status, fetch, the trigger/poll/fetch workflow, its error classes). It speaks aiohttp,
so the exchanges are not replayed request for request as for the `requests` clients: the SDK
and our connector read the same snapshot on the simulator (a ready snapshot is served the same
to every download). The SDK has no cancel call; cancel is covered against the simulator in
tests/connectors/test_brightdata.py.

What the SDK exposes is the decoded JSON (a snapshot's records, the status string, the
snapshot id, an APIError's status and text): the adapter's answer must be the record's
markdown answer, its citations the record's `citations`, its searches the record's
`web_search_query`, its ids the SDK's snapshot id, its error messages the SDK's texts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from brightdata.core.engine import AsyncEngine
from brightdata.exceptions import APIError, AuthenticationError, DataNotReadyError
from brightdata.scrapers.api_client import DatasetAPIClient
from brightdata.scrapers.chatgpt.search import ChatGPTSearchService
from brightdata.scrapers.perplexity.scraper import PerplexityScraper

from connectors.adapters.brightdata import (
    BrightDataAIMode,
    BrightDataChatGPT,
    BrightDataConnector,
    BrightDataCopilot,
    BrightDataGemini,
    BrightDataPerplexity,
    split_upstream_id,
    upstream_id_of,
)
from connectors.base import ConnectorConfig, ErrorClass, SampleRequest, UpstreamError
from simulator import SimulatorHandle

from .harness import API_KEY

T = TypeVar("T")
QUESTIONS = ["Which CRM is best for a small team?", "Which help desk should a startup pick?"]
SURFACES: dict[str, type[BrightDataConnector]] = {
    "chatgpt_web": BrightDataChatGPT,
    "perplexity_web": BrightDataPerplexity,
    "gemini_web": BrightDataGemini,
    "copilot_web": BrightDataCopilot,
    "google_ai_mode": BrightDataAIMode,
}


def point_at(client: DatasetAPIClient, sim: SimulatorHandle) -> DatasetAPIClient:
    """The SDK's client, its endpoint URLs on this instance set to the simulator's."""
    base = f"{sim.url('brightdata')}/datasets/v3"
    client.TRIGGER_URL = f"{base}/trigger"
    client.STATUS_URL = f"{base}/progress"
    client.RESULT_URL = f"{base}/snapshot"
    return client


def with_client(sim: SimulatorHandle, call: Callable[[DatasetAPIClient], Awaitable[T]]) -> T:
    async def run() -> T:
        engine = AsyncEngine(API_KEY, rate_limit=0)
        async with engine:
            return await call(point_at(DatasetAPIClient(engine), sim))

    return asyncio.run(run())


def ours(sim: SimulatorHandle, surface: str) -> BrightDataConnector:
    config = ConnectorConfig(platform=surface, base_url=sim.url("brightdata"), api_key=API_KEY)
    return SURFACES[surface](config)


def ask(question: str, number: int = 1, **target: str) -> SampleRequest:
    fields = {"device": "desktop", "region": "us", "mode": "web_search"} | target
    return SampleRequest(sample_id=number, idempotency_key=f"fid-{number}", question=question,
                         **fields)  # fmt: skip


def prepare(sim: SimulatorHandle, *, running_looks: int = 0) -> None:
    sim.reset()
    sim.configure(seed=17, profile={"citation_rate": 1.0, "cjk_rate": 0.0,
                                    "brightdata": {"running_looks": running_looks}})  # fmt: skip


def assert_same_answer(
    record: dict[str, Any], connector: BrightDataConnector, upstream_id: str
) -> None:
    """What our connector reads from the snapshot is what the SDK handed over for the input."""
    result = connector.fetch_evidence(upstream_id)
    assert result.collection_state == "completed", result.error
    assert result.answer_text == (record.get("answer_text_markdown") or record["answer_text"])
    assert [c.url for c in result.citations] == [c["url"] for c in record["citations"]]
    assert [c.title for c in result.citations] == [c["title"] for c in record["citations"]]
    assert result.search_queries == record.get("web_search_query", [])
    assert result.upstream_id == upstream_id


# --- the SDK's own scrapers: the whole trigger / poll / fetch workflow --------------------


def test_the_sdks_perplexity_search_reads_what_our_connector_reads(sim: SimulatorHandle) -> None:
    prepare(sim)

    async def search() -> Any:
        scraper = PerplexityScraper(bearer_token=API_KEY)
        point_at(scraper.api_client, sim)
        async with scraper.engine:
            return await scraper.search(prompt=QUESTIONS, country=["us", "de"], index=[1, 2],
                                        poll_interval=0, poll_timeout=30)  # fmt: skip

    result = asyncio.run(search())
    assert result.success and result.status == "ready", result.error
    assert isinstance(result.data, list) and len(result.data) == 2
    connector = ours(sim, "perplexity_web")
    # The SDK's inputs are ours, field for field.
    asked = [ask(QUESTIONS[0], 1), ask(QUESTIONS[1], 2, region="de")]
    assert [r["input"] for r in result.data] == [
        connector.input_for(request, n) for n, request in enumerate(asked, start=1)
    ]
    for record in result.data:
        assert record["web_search_query"]  # Perplexity reports its searches
        assert_same_answer(record, connector, upstream_id_of(result.snapshot_id, record["index"]))


def test_the_sdks_chatgpt_prompt_reads_what_our_connector_reads(sim: SimulatorHandle) -> None:
    """The SDK sends no `index` (and `https://chatgpt.com` without the docs' slash): our
    connector finds each record by its place in the snapshot, as the adapter does when a
    snapshot carries no indexes."""
    prepare(sim)

    async def prompt() -> Any:
        service = ChatGPTSearchService(bearer_token=API_KEY)
        point_at(service.api_client, sim)
        async with service.engine:
            return await service.prompt(prompt=QUESTIONS, country=["us", "gb"],
                                        webSearch=[True, False], timeout=30)  # fmt: skip

    result = asyncio.run(prompt())
    assert result.success and result.status == "ready", result.error
    connector = ours(sim, "chatgpt_web")
    for position, record in enumerate(result.data, start=1):
        assert record["input"]["web_search"] is (position == 1)
        assert_same_answer(record, connector, upstream_id_of(result.snapshot_id, position))
        found = connector.fetch_evidence(upstream_id_of(result.snapshot_id, position)).found
        cited = {c["url"] for c in record["citations"]}
        assert [f.url for f in found] == [
            s["url"] for s in record["search_sources"] if s["url"] not in cited
        ]


# --- the Datasets API client, endpoint by endpoint, for every scraper --------------------


@pytest.mark.parametrize("surface", sorted(SURFACES))
def test_trigger_progress_and_download_as_the_sdk_reads_them(
    sim: SimulatorHandle, surface: str
) -> None:
    prepare(sim, running_looks=2)  # a status and a download find it running
    connector = ours(sim, surface)
    inputs = [connector.input_for(ask(q, n), n) for n, q in enumerate(QUESTIONS, start=1)]

    async def lifecycle(client: DatasetAPIClient) -> tuple[str, list[str], Any, Exception]:
        snapshot_id = await client.trigger(payload=inputs, dataset_id=connector.dataset)
        assert snapshot_id is not None
        statuses = [await client.get_status(snapshot_id)]
        try:
            await client.fetch_result(snapshot_id)  # a look while it still runs
        except DataNotReadyError as early:
            not_ready: Exception = early
        statuses.append(await client.get_status(snapshot_id))
        return snapshot_id, statuses, await client.fetch_result(snapshot_id), not_ready

    snapshot_id, statuses, records, not_ready = with_client(sim, lifecycle)
    assert statuses == ["running", "ready"]
    assert "HTTP 202" in str(not_ready) and "not ready yet" in str(not_ready)
    assert connector.poll(upstream_id_of(snapshot_id, 1)).state == "completed"
    assert [r["index"] for r in records] == [1, 2]
    for record in records:
        assert_same_answer(record, connector, upstream_id_of(snapshot_id, record["index"]))


def test_a_download_before_ready_is_202_to_both(sim: SimulatorHandle) -> None:
    prepare(sim, running_looks=5)
    connector = ours(sim, "copilot_web")
    [outcome] = connector.submit_batch([ask(QUESTIONS[0])])
    assert not isinstance(outcome, UpstreamError)
    snapshot_id, _ = split_upstream_id(outcome.upstream_id)

    async def early(client: DatasetAPIClient) -> tuple[str, Exception | None]:
        status = await client.get_status(snapshot_id)
        try:
            await client.fetch_result(snapshot_id)
        except DataNotReadyError as error:
            return status, error
        return status, None

    status, error = with_client(sim, early)
    assert status == "running" and connector.poll(outcome.upstream_id).state == "running"
    assert isinstance(error, DataNotReadyError)
    with pytest.raises(UpstreamError) as ours_early:
        connector.fetch_evidence(outcome.upstream_id)
    assert ours_early.value.error_class is ErrorClass.POLL_FAILED
    assert ours_early.value.message in str(error)


def test_a_partial_snapshot_as_the_sdk_reads_it(sim: SimulatorHandle) -> None:
    prepare(sim)
    sim.script({"match": QUESTIONS[1], "fault": "task_failed", "platform": "gemini_web",
                "times": None})  # fmt: skip
    connector = ours(sim, "gemini_web")
    inputs = [connector.input_for(ask(q, n), n) for n, q in enumerate(QUESTIONS, start=1)]

    async def run(client: DatasetAPIClient) -> tuple[str, Any]:
        snapshot_id = await client.trigger(payload=inputs, dataset_id=connector.dataset)
        assert snapshot_id is not None
        assert await client.get_status(snapshot_id) == "ready"
        return snapshot_id, await client.fetch_result(snapshot_id)

    snapshot_id, records = with_client(sim, run)
    good, errored = records
    assert_same_answer(good, connector, upstream_id_of(snapshot_id, 1))
    failed = connector.fetch_evidence(upstream_id_of(snapshot_id, 2))
    assert failed.collection_state == "failed" and failed.error is not None
    assert failed.error["message"] == errored["error"]
    assert failed.error["code"] == errored["error_code"]


def test_a_failed_snapshot_is_failed_to_both(sim: SimulatorHandle) -> None:
    prepare(sim)
    sim.script({"match": "trigger", "fault": "task_failed", "platform": "copilot_web",
                "params": {"snapshot": True}, "times": 1})  # fmt: skip
    connector = ours(sim, "copilot_web")
    [outcome] = connector.submit_batch([ask(QUESTIONS[0])])
    assert not isinstance(outcome, UpstreamError)
    snapshot_id, _ = split_upstream_id(outcome.upstream_id)
    status = with_client(sim, lambda client: client.get_status(snapshot_id))
    assert status == "failed" and connector.poll(outcome.upstream_id).state == "failed"


@pytest.mark.parametrize(
    ("fault", "status", "error_class"),
    [
        ("rate_limit", 429, ErrorClass.RATE_LIMITED),
        ("server_error", 500, ErrorClass.TRANSIENT),
    ],
)
def test_a_refused_trigger_is_the_same_refusal_to_both(
    sim: SimulatorHandle, fault: str, status: int, error_class: ErrorClass
) -> None:
    prepare(sim)
    sim.script({"match": "trigger", "fault": fault, "platform": "perplexity_web", "times": 2})
    connector = ours(sim, "perplexity_web")
    inputs = [connector.input_for(ask(QUESTIONS[0]), 1)]

    async def refused(client: DatasetAPIClient) -> APIError:
        with pytest.raises(APIError) as raised:
            await client.trigger(payload=inputs, dataset_id=connector.dataset)
        return raised.value

    sdk_error = with_client(sim, refused)
    with pytest.raises(UpstreamError) as ours_error:
        connector.submit(ask(QUESTIONS[0]))
    assert sdk_error.status_code == ours_error.value.status_code == status
    assert ours_error.value.error_class is error_class
    assert str(sdk_error) == f"Trigger failed (HTTP {status}): {ours_error.value.message}"


def test_an_unknown_dataset_and_a_bad_key_as_the_sdk_reads_them(sim: SimulatorHandle) -> None:
    prepare(sim)
    config = ConnectorConfig(platform="copilot_web", base_url=sim.url("brightdata"),
                             api_key=API_KEY, extra={"dataset_id": "gd_nosuch"})  # fmt: skip
    connector = BrightDataCopilot(config)
    inputs = [connector.input_for(ask(QUESTIONS[0]), 1)]

    async def unknown(client: DatasetAPIClient) -> APIError:
        with pytest.raises(APIError) as raised:
            await client.trigger(payload=inputs, dataset_id="gd_nosuch")
        return raised.value

    sdk_error = with_client(sim, unknown)
    with pytest.raises(UpstreamError) as ours_error:
        connector.submit(ask(QUESTIONS[0]))
    assert sdk_error.status_code == 404 and ours_error.value.error_class is ErrorClass.INVALID
    assert str(sdk_error).endswith(ours_error.value.message)

    async def bad_key() -> Exception:
        engine = AsyncEngine("invalid-key", rate_limit=0)
        async with engine:
            client = point_at(DatasetAPIClient(engine), sim)
            with pytest.raises(AuthenticationError) as raised:
                await client.trigger(payload=inputs, dataset_id=BrightDataCopilot.dataset_id)
            return raised.value

    sdk_auth = asyncio.run(bad_key())
    refused = BrightDataCopilot(ConnectorConfig(platform="copilot_web",
                                                base_url=sim.url("brightdata"),
                                                api_key="invalid-key"))  # fmt: skip
    with pytest.raises(UpstreamError) as ours_auth:
        refused.submit(ask(QUESTIONS[0]))
    assert ours_auth.value.error_class is ErrorClass.AUTH
    assert str(sdk_auth).endswith(ours_auth.value.message)
