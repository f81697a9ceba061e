"""DataForSEO's LLM Responses API as a vendor of the model platforms (openai, anthropic,
gemini, perplexity), over HTTP against the simulator on 127.0.0.1: the answer, its citations,
its fan-out, its cost, and the errors."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings

from connectors.adapters.dataforseo import (
    DataForSEOChatGPTResponses,
    DataForSEOClaudeResponses,
    DataForSEOConnector,
    DataForSEOGeminiResponses,
    DataForSEOPerplexityResponses,
    usd_cents,
)
from connectors.base import ConnectorConfig, ErrorClass, SampleRequest, UpstreamError
from connectors.registry import get_connector
from simulator import SimulatorHandle

QUESTION = "Which CRM is best for a small team?"
ENGINES = [
    pytest.param("openai", DataForSEOChatGPTResponses, "gpt-4.1-mini", "chat_gpt", id="openai"),
    pytest.param("anthropic", DataForSEOClaudeResponses, "claude-sonnet-4-5", "claude",
                 id="anthropic"),
    pytest.param("gemini", DataForSEOGeminiResponses, "gemini-2.5-flash", "gemini", id="gemini"),
    pytest.param("perplexity", DataForSEOPerplexityResponses, "sonar", "perplexity",
                 id="perplexity"),
]  # fmt: skip


@pytest.fixture
def dfs_sim(simulator: SimulatorHandle) -> SimulatorHandle:
    simulator.configure(seed=17, profile={"citation_rate": 1.0, "cjk_rate": 0.0})
    return simulator


def connector(
    sim: SimulatorHandle, cls: type[DataForSEOConnector], platform: str, model: str
) -> DataForSEOConnector:
    config = ConnectorConfig(
        platform=platform,
        base_url=sim.url("dataforseo"),
        api_key="llm-login:dfs-llm-secret",
        model=model,
    )
    return cls(config)


def request(mode: str = "web_search", question: str = QUESTION) -> SampleRequest:
    return SampleRequest(
        sample_id=5,
        idempotency_key="sample-5-attempt-1",
        question=question,
        device="desktop",
        region="us",
        mode=mode,
    )


def task_of(raw: bytes) -> dict[str, Any]:
    task: dict[str, Any] = json.loads(raw)["tasks"][0]
    return task


@pytest.mark.parametrize(("platform", "cls", "model", "se"), ENGINES)
def test_the_answer_its_citations_fan_out_and_cost_in_one_call(
    dfs_sim: SimulatorHandle,
    platform: str,
    cls: type[DataForSEOConnector],
    model: str,
    se: str,
) -> None:
    ours = connector(dfs_sim, cls, platform, model)
    capabilities = ours.capabilities()
    assert not capabilities.asynchronous and not capabilities.supports_lookup
    assert capabilities.submission_limit == 1 and capabilities.languages == frozenset()

    outcome = ours.submit(request())

    result = outcome.result
    assert result is not None and result.collection_state == "completed"
    task = task_of(result.raw)
    assert task["path"] == ["v3", "ai_optimization", se, "llm_responses", "live"]
    sent = task["data"]
    assert sent["user_prompt"] == QUESTION and sent["model_name"] == model
    assert sent["tag"] == "sample-5-attempt-1"
    # Perplexity documents no `web_search` field (its Sonar models always search).
    assert sent.get("web_search") is (None if platform == "perplexity" else True)
    [section] = task["result"][0]["items"][0]["sections"]
    assert result.answer_text == section["text"] != ""
    originals = [a.get("direct_url") or a["url"] for a in section["annotations"]]
    assert [c.url for c in result.citations] == list(dict.fromkeys(originals)) != []
    assert result.search_queries == task["result"][0]["fan_out_queries"] != []
    assert result.found == []  # the API separates no found sources
    for citation, annotation in zip(result.citations, section["annotations"], strict=False):
        assert (citation.start, citation.end) == (
            annotation["start_index"],
            annotation["end_index"],
        )
    # The stated charge goes on the attempt (the outcome) and with the evidence (the result).
    assert outcome.cost == result.cost == usd_cents(task["cost"]) and outcome.cost
    assert outcome.cost_currency == result.cost_currency == "USD"
    assert outcome.upstream_id == task["id"]
    # The parse of the captured bytes is the live one (`manage.py reparse`).
    again = cls.parse(result.raw, sample_id=5)
    assert (again.answer_text, again.citations, again.cost) == (
        result.answer_text,
        result.citations,
        result.cost,
    )


@pytest.mark.parametrize(("platform", "cls", "model", "se"), ENGINES)
def test_a_rate_limited_call_is_classified_as_the_other_endpoints_are(
    dfs_sim: SimulatorHandle,
    platform: str,
    cls: type[DataForSEOConnector],
    model: str,
    se: str,
) -> None:
    dfs_sim.script({"match": QUESTION, "fault": "rate_limit", "platform": platform})
    with pytest.raises(UpstreamError) as error:
        connector(dfs_sim, cls, platform, model).submit(request())
    assert error.value.error_class is ErrorClass.RATE_LIMITED and "40202" in error.value.message


def test_without_search_no_sources_and_no_fan_out(dfs_sim: SimulatorHandle) -> None:
    ours = connector(dfs_sim, DataForSEOClaudeResponses, "anthropic", "claude-sonnet-4-5")
    outcome = ours.submit(request(mode="no_search"))
    assert outcome.result is not None and outcome.result.answer_text
    assert task_of(outcome.result.raw)["data"]["web_search"] is False
    assert outcome.result.citations == [] and outcome.result.search_queries == []
    perplexity = connector(dfs_sim, DataForSEOPerplexityResponses, "perplexity", "sonar")
    assert perplexity.capabilities().modes == frozenset({"web_search"})


@pytest.mark.parametrize(("platform", "cls", "model", "se"), ENGINES)
def test_a_target_the_own_api_takes_is_taken_through_the_vendor(
    settings: Any, platform: str, cls: type[DataForSEOConnector], model: str, se: str
) -> None:
    """Switching the vendor on never refuses a target the platform's own adapter takes
    (its devices and regions; a mode the vendor cannot ask is the exception, named)."""
    settings.GEO_PLATFORMS = {}
    own = get_connector(platform).capabilities()
    vendor = cls(ConnectorConfig(platform=platform, base_url="http://127.0.0.1:9")).capabilities()
    assert (vendor.devices, vendor.regions) == (own.devices, own.regions)
    assert vendor.modes <= own.modes and "web_search" in vendor.modes


def test_a_refused_field_credentials_and_a_failed_task(dfs_sim: SimulatorHandle) -> None:
    ours = connector(dfs_sim, DataForSEOChatGPTResponses, "openai", "gpt-4.1-mini")
    with pytest.raises(UpstreamError) as refused:  # "up to 500 characters in user_prompt"
        ours.submit(request(question="Why " * 200))
    assert refused.value.error_class is ErrorClass.INVALID and "40501" in refused.value.message

    question = "Which CRM failed to answer?"
    dfs_sim.script({"match": question, "fault": "task_failed", "platform": "openai"})
    outcome = ours.submit(request(question=question))
    assert outcome.result is not None and outcome.result.collection_state == "failed"
    assert outcome.result.error is not None and outcome.result.error["code"] == 40101

    locked_out = ConnectorConfig(
        platform="openai", base_url=dfs_sim.url("dataforseo"), api_key="invalid-login:pw"
    )
    with pytest.raises(UpstreamError) as error:
        DataForSEOChatGPTResponses(locked_out).submit(request())
    assert error.value.error_class is ErrorClass.AUTH
    assert "pw" not in error.value.message


CAPTURED = Path(__file__).parent / "fixtures" / "dataforseo_llm_responses"


@pytest.mark.parametrize("platform", ["openai", "anthropic", "gemini", "perplexity"])
def test_reparse_of_a_captured_llm_response_prints_the_reviewed_result(platform: str) -> None:
    """Captured from the simulator through the live path (seed 7), `live.expected.json` being
    `manage.py reparse` of it, reviewed. Kept apart from fixtures/<platform>/: those are the
    platform's own API's, parsed by its direct adapter."""
    out = StringIO()
    with override_settings(GEO_PLATFORMS={platform: {"VENDOR": "dataforseo"}}):
        call_command(
            "reparse", str(CAPTURED / platform / "live.json"), platform=platform, stdout=out
        )
    printed = json.loads(out.getvalue())
    wanted = json.loads((CAPTURED / platform / "live.expected.json").read_text(encoding="utf-8"))
    assert printed == wanted
    assert printed["collection_state"] == "completed" and printed["citations"]
    assert printed["search_queries"] and printed["cost"] == 1  # $0.0007 rounds up to 1 cent
    text = printed["answer_text"]
    for citation in printed["citations"]:  # the annotations' spans, in the answer
        assert 0 <= citation["start"] < citation["end"] <= len(text)
