"""DataForSEO: the official `dataforseo-client` (generated from the vendor's OpenAPI
description, pydantic models) pointed at the simulator, against our adapter.

The client takes a base URL (`Configuration(host=...)`), so it is the oracle as the engines'
SDKs are (tests/fidelity/harness.py): it builds its own requests (the simulator must accept
them: the request side), it parses every answer the simulator serves into its typed models
(the response side), and what our adapter extracts from the same bytes equals what the client
exposes. Every endpoint the adapter uses is asked: task_post, task_get/advanced (deferred,
then ready), tasks_ready, id_list, live/advanced, the four LLM Responses `live` endpoints
(openai, anthropic, gemini, perplexity resold), and the error shapes (credentials refused, the
per-minute rate limit, a vendor error, a refused field, a failed task).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from dataforseo_client import ApiClient, Configuration
from dataforseo_client.api.ai_optimization_api import AiOptimizationApi
from dataforseo_client.api.serp_api import SerpApi
from dataforseo_client.exceptions import ApiException, UnauthorizedException
from dataforseo_client.models.ai_optimization_chat_gpt_llm_responses_live_request_info import (
    AiOptimizationChatGptLlmResponsesLiveRequestInfo,
)
from dataforseo_client.models.ai_optimization_chat_gpt_llm_responses_live_response_info import (
    AiOptimizationChatGptLlmResponsesLiveResponseInfo,
)
from dataforseo_client.models.ai_optimization_chat_gpt_llm_scraper_live_advanced_request_info import (  # noqa: E501
    AiOptimizationChatGptLlmScraperLiveAdvancedRequestInfo,
)
from dataforseo_client.models.ai_optimization_chat_gpt_llm_scraper_live_advanced_response_info import (  # noqa: E501
    AiOptimizationChatGptLlmScraperLiveAdvancedResponseInfo,
)
from dataforseo_client.models.ai_optimization_chat_gpt_llm_scraper_task_get_advanced_response_info import (  # noqa: E501
    AiOptimizationChatGptLlmScraperTaskGetAdvancedResponseInfo,
)
from dataforseo_client.models.ai_optimization_chat_gpt_llm_scraper_task_post_request_info import (
    AiOptimizationChatGptLlmScraperTaskPostRequestInfo,
)
from dataforseo_client.models.ai_optimization_claude_llm_responses_live_request_info import (
    AiOptimizationClaudeLlmResponsesLiveRequestInfo,
)
from dataforseo_client.models.ai_optimization_claude_llm_responses_live_response_info import (
    AiOptimizationClaudeLlmResponsesLiveResponseInfo,
)
from dataforseo_client.models.ai_optimization_gemini_llm_responses_live_request_info import (
    AiOptimizationGeminiLlmResponsesLiveRequestInfo,
)
from dataforseo_client.models.ai_optimization_gemini_llm_responses_live_response_info import (
    AiOptimizationGeminiLlmResponsesLiveResponseInfo,
)
from dataforseo_client.models.ai_optimization_gemini_llm_scraper_task_get_advanced_response_info import (  # noqa: E501
    AiOptimizationGeminiLlmScraperTaskGetAdvancedResponseInfo,
)
from dataforseo_client.models.ai_optimization_gemini_llm_scraper_task_post_request_info import (
    AiOptimizationGeminiLlmScraperTaskPostRequestInfo,
)
from dataforseo_client.models.ai_optimization_perplexity_llm_responses_live_request_info import (
    AiOptimizationPerplexityLlmResponsesLiveRequestInfo,
)
from dataforseo_client.models.ai_optimization_perplexity_llm_responses_live_response_info import (
    AiOptimizationPerplexityLlmResponsesLiveResponseInfo,
)
from dataforseo_client.models.serp_google_ai_mode_task_get_advanced_response_info import (
    SerpGoogleAiModeTaskGetAdvancedResponseInfo,
)
from dataforseo_client.models.serp_google_ai_mode_task_post_request_info import (
    SerpGoogleAiModeTaskPostRequestInfo,
)
from dataforseo_client.models.serp_google_organic_task_get_advanced_response_info import (
    SerpGoogleOrganicTaskGetAdvancedResponseInfo,
)
from dataforseo_client.models.serp_google_organic_task_post_request_info import (
    SerpGoogleOrganicTaskPostRequestInfo,
)
from dataforseo_client.models.serp_id_list_request_info import SerpIdListRequestInfo

from connectors.adapters.dataforseo import (
    DataForSEOAIMode,
    DataForSEOAIOverview,
    DataForSEOChatGPTResponses,
    DataForSEOChatGPTScraper,
    DataForSEOClaudeResponses,
    DataForSEOConnector,
    DataForSEOGeminiResponses,
    DataForSEOGeminiScraper,
    DataForSEOPerplexityResponses,
    usd_cents,
)
from connectors.base import ConnectorConfig, ErrorClass, SampleRequest, UpstreamError
from simulator import SimulatorHandle

LOGIN, PASSWORD = "fidelity@example.com", "dfs-fidelity-password"
QUESTION = "Which CRM is best for a small team?"
TAG = "sample-41-attempt-1"


@pytest.fixture
def dfs(sim: SimulatorHandle) -> Iterator[ApiClient]:
    sim.reset()
    sim.configure(seed=17, profile={"citation_rate": 1.0, "cjk_rate": 0.0, "emoji_rate": 0.0})
    config = Configuration(host=sim.url("dataforseo"), username=LOGIN, password=PASSWORD)
    with ApiClient(config) as client:
        yield client


def connector(
    sim: SimulatorHandle, cls: type[DataForSEOConnector], platform: str, **extra: Any
) -> DataForSEOConnector:
    config = ConnectorConfig(
        platform=platform,
        base_url=sim.url("dataforseo"),
        api_key=f"{LOGIN}:{PASSWORD}",
        extra=extra,
    )
    return cls(config)


def raw_of(call: Callable[..., Any], *args: Any, **kwargs: Any) -> bytes:
    """The exact bytes the client received for a call (its `_without_preload_content` form)."""
    response = call(*args, **kwargs)
    data: bytes = response.data
    return data


SCRAPERS = [
    pytest.param(
        "chatgpt_web",
        DataForSEOChatGPTScraper,
        "chat_gpt",
        AiOptimizationChatGptLlmScraperTaskPostRequestInfo,
        AiOptimizationChatGptLlmScraperTaskGetAdvancedResponseInfo,
        id="chatgpt_web",
    ),
    pytest.param(
        "gemini_web",
        DataForSEOGeminiScraper,
        "gemini",
        AiOptimizationGeminiLlmScraperTaskPostRequestInfo,
        AiOptimizationGeminiLlmScraperTaskGetAdvancedResponseInfo,
        id="gemini_web",
    ),
]


@pytest.mark.parametrize(("platform", "cls", "se", "post_model", "get_model"), SCRAPERS)
def test_the_client_parses_an_llm_scraper_task_and_the_adapter_reads_what_it_exposes(
    sim: SimulatorHandle,
    dfs: ApiClient,
    platform: str,
    cls: type[DataForSEOConnector],
    se: str,
    post_model: Any,
    get_model: Any,
) -> None:
    api = AiOptimizationApi(dfs)
    task = post_model(
        keyword=QUESTION, location_code=2840, language_code="en", force_web_search=True, tag=TAG
    )
    posted = getattr(api, f"{se}_llm_scraper_task_post")([task])
    assert posted.status_code == 20000 and posted.tasks_count == 1
    [created] = posted.tasks
    assert created.status_code == 20100 and created.data["tag"] == TAG
    assert created.cost and created.cost > 0

    # The result is deferred: the first look finds the task still queued.
    get_raw = getattr(api, f"{se}_llm_scraper_task_get_advanced_without_preload_content")
    queued = get_model.from_json(raw_of(get_raw, created.id))
    assert queued.tasks[0].status_code == 40602 and queued.tasks[0].result is None
    ours = connector(sim, cls, platform)
    assert ours.lookup(TAG) == created.id  # listed in tasks_ready once it is done
    ready = getattr(api, f"{se}_llm_scraper_tasks_ready")()
    assert [r.tag for r in ready.tasks[0].result] == [TAG]
    assert [r.id for r in ready.tasks[0].result] == [created.id]

    raw = raw_of(get_raw, created.id)
    client_view = get_model.from_json(raw)
    [result] = client_view.tasks[0].result
    parsed = cls.parse(raw, sample_id=41)
    assert parsed.collection_state == "completed"
    assert parsed.upstream_id == created.id
    assert parsed.answer_text == result.markdown
    assert parsed.answer_text == result.items[0].markdown
    cited = list(dict.fromkeys(source.url for source in result.sources))
    assert [c.url for c in parsed.citations] == cited
    assert [c.title for c in parsed.citations] == [s.title for s in result.sources]
    assert parsed.cost is None  # results are free: the charge was stated at task_post
    if se == "chat_gpt":
        # The searches the engine ran, and what they retrieved that the answer does not cite.
        assert result.fan_out_queries and parsed.search_queries == result.fan_out_queries
        read = [r.url for r in result.search_results]
        assert set(read) > set(cited)
        assert [f.url for f in parsed.found] == [url for url in read if url not in cited]
        assert [f.id for f in parsed.found] == [f"f{i}" for i in range(1, len(parsed.found) + 1)]
    else:  # the Gemini scraper documents neither
        assert (parsed.search_queries, parsed.found) == ([], [])


def test_the_adapter_posts_what_the_client_posts_and_states_the_same_cost(
    sim: SimulatorHandle, dfs: ApiClient
) -> None:
    request = SampleRequest(
        sample_id=7,
        idempotency_key=TAG,
        question=QUESTION,
        device="desktop",
        region="de",
        mode="web_search",
    )
    outcome = connector(sim, DataForSEOChatGPTScraper, "chatgpt_web").submit(request)
    log = sim.answers("chatgpt_web")
    assert [entry["tag"] for entry in log] == [TAG]
    posted = AiOptimizationApi(dfs).chat_gpt_llm_scraper_task_post(
        [
            AiOptimizationChatGptLlmScraperTaskPostRequestInfo(
                keyword=QUESTION,
                location_code=2276,
                language_code="de",
                force_web_search=True,
                tag="the-clients-own",
            )
        ]
    )
    assert outcome.cost == usd_cents(posted.tasks[0].cost) and outcome.cost_currency == "USD"
    assert outcome.upstream_id != posted.tasks[0].id  # never deduplicated by tag


SERP = [
    pytest.param(
        "google_ai_mode",
        DataForSEOAIMode,
        "google_ai_mode",
        SerpGoogleAiModeTaskPostRequestInfo,
        SerpGoogleAiModeTaskGetAdvancedResponseInfo,
        {},
        id="google_ai_mode",
    ),
    pytest.param(
        "google_ai_overview",
        DataForSEOAIOverview,
        "google_organic",
        SerpGoogleOrganicTaskPostRequestInfo,
        SerpGoogleOrganicTaskGetAdvancedResponseInfo,
        {"load_async_ai_overview": True},
        id="google_ai_overview",
    ),
]


@pytest.mark.parametrize(("platform", "cls", "name", "post_model", "get_model", "more"), SERP)
def test_the_client_parses_a_serp_task_and_the_adapter_reads_its_ai_overview(
    sim: SimulatorHandle,
    dfs: ApiClient,
    platform: str,
    cls: type[DataForSEOConnector],
    name: str,
    post_model: Any,
    get_model: Any,
    more: dict[str, Any],
) -> None:
    api = SerpApi(dfs)
    task = post_model(
        keyword=QUESTION, location_code=2826, language_code="en", device="mobile", tag=TAG, **more
    )
    posted = getattr(api, f"{name}_task_post")([task])
    [created] = posted.tasks
    assert created.status_code == 20100 and created.data["device"] == "mobile"

    ours = connector(sim, cls, platform)
    assert ours.lookup(TAG) == created.id
    listed = api.id_list(
        [
            SerpIdListRequestInfo(
                datetime_from="2026-01-01 00:00:00 +00:00",
                datetime_to="2099-01-01 00:00:00 +00:00",
                include_metadata=True,
            )
        ]
    )
    [entry] = [e for e in listed.tasks[0].result if e.id == created.id]
    assert entry.metadata["tag"] == TAG
    found = ours.find_again(TAG)
    assert found is not None and found.upstream_id == created.id
    assert found.cost == (usd_cents(entry.cost), "USD")

    get_raw = getattr(api, f"{name}_task_get_advanced_without_preload_content")
    assert get_model.from_json(raw_of(get_raw, created.id)).tasks[0].status_code == 40602
    raw = raw_of(get_raw, created.id)
    [result] = get_model.from_json(raw).tasks[0].result
    overviews = [i for i in result.items if i.type == "ai_overview"]
    [overview] = overviews
    parsed = cls.parse(raw, sample_id=41)
    assert parsed.answer_text == overview.markdown
    # What an element rests on is cited; what only the overview's list adds is found.
    used = list(dict.fromkeys(r.url for e in overview.items for r in e.references or []))
    assert used and [c.url for c in parsed.citations] == used
    listed = [r.url for r in overview.references]
    assert [f.url for f in parsed.found] == [url for url in listed if url not in used] != []
    assert parsed.search_queries == []  # the SERP documents no searches
    element = overview.items[0]
    assert element.type == "ai_overview_element" and element.text == overview.markdown
    if platform == "google_ai_overview":
        assert overview.asynchronous_ai_overview is True
        assert "organic" in result.item_types


def test_the_client_parses_a_live_answer_and_the_adapter_answers_in_the_call(
    sim: SimulatorHandle, dfs: ApiClient
) -> None:
    api = AiOptimizationApi(dfs)
    task = AiOptimizationChatGptLlmScraperLiveAdvancedRequestInfo(
        keyword=QUESTION, location_code=2840, language_code="en", force_web_search=True
    )
    raw = raw_of(api.chat_gpt_llm_scraper_live_advanced_without_preload_content, [task])
    client_view = AiOptimizationChatGptLlmScraperLiveAdvancedResponseInfo.from_json(raw)
    [result] = client_view.tasks[0].result
    parsed = DataForSEOChatGPTScraper.parse(raw, sample_id=3)
    assert parsed.answer_text == result.markdown
    assert [c.url for c in parsed.citations] == list(dict.fromkeys(s.url for s in result.sources))
    assert parsed.cost == usd_cents(client_view.tasks[0].cost)

    live = connector(sim, DataForSEOChatGPTScraper, "chatgpt_web", method="live")
    request = SampleRequest(
        sample_id=3,
        idempotency_key=TAG,
        question=QUESTION,
        device="desktop",
        region="us",
        mode="web_search",
    )
    outcome = live.submit(request)
    assert outcome.result is not None and outcome.result.collection_state == "completed"
    assert not live.capabilities().asynchronous
    # The live call's charge goes on the attempt (the outcome), as task_post's does.
    assert outcome.cost == outcome.result.cost and outcome.cost_currency == "USD"


def test_refused_credentials_are_an_auth_failure_to_both(
    sim: SimulatorHandle, dfs: ApiClient
) -> None:
    # A login starting with `invalid` is what the simulator refuses.
    bad = Configuration(host=sim.url("dataforseo"), username="invalid-login", password="pw")
    with ApiClient(bad) as client, pytest.raises(UnauthorizedException) as refused:
        AiOptimizationApi(client).chat_gpt_llm_scraper_tasks_ready()
    assert refused.value.status == 401
    assert '"status_code": 40100' in (refused.value.body or "")
    ours = connector(sim, DataForSEOChatGPTScraper, "chatgpt_web")
    ours.config = ConnectorConfig(
        platform="chatgpt_web", base_url=sim.url("dataforseo"), api_key="invalid-login:pw"
    )
    ours.transport = type(ours.transport)(ours.config)
    with pytest.raises(UpstreamError) as error:
        ours.lookup(TAG)
    assert error.value.error_class is ErrorClass.AUTH


@pytest.mark.parametrize(
    ("fault", "http", "code", "error_class"),
    [
        ("rate_limit", 200, 40202, ErrorClass.RATE_LIMITED),
        ("server_error", 500, 50000, ErrorClass.TRANSIENT),
        ("overloaded", 200, 50303, ErrorClass.TRANSIENT),
        ("auth_error", 402, 40200, ErrorClass.AUTH),
    ],
)
def test_a_refused_call_is_the_envelope_the_client_reads_and_the_adapter_classifies(
    sim: SimulatorHandle,
    dfs: ApiClient,
    fault: str,
    http: int,
    code: int,
    error_class: ErrorClass,
) -> None:
    sim.script({"match": QUESTION, "fault": fault, "platform": "chatgpt_web", "times": None})
    api = AiOptimizationApi(dfs)
    task = AiOptimizationChatGptLlmScraperTaskPostRequestInfo(
        keyword=QUESTION, location_code=2840, language_code="en", tag=TAG
    )
    if http == 200:
        refused = api.chat_gpt_llm_scraper_task_post([task])
        assert refused.status_code == code and refused.tasks == []
    else:
        with pytest.raises(ApiException) as raised:
            api.chat_gpt_llm_scraper_task_post([task])
        assert raised.value.status == http and f'"status_code": {code}' in str(raised.value.body)
    request = SampleRequest(
        sample_id=9,
        idempotency_key=TAG,
        question=QUESTION,
        device="desktop",
        region="us",
        mode="web_search",
    )
    with pytest.raises(UpstreamError) as error:
        connector(sim, DataForSEOChatGPTScraper, "chatgpt_web").submit(request)
    assert error.value.error_class is error_class
    assert str(code) in error.value.message


def test_a_refused_field_and_a_failed_task_read_alike(sim: SimulatorHandle, dfs: ApiClient) -> None:
    api = AiOptimizationApi(dfs)
    bad = AiOptimizationChatGptLlmScraperTaskPostRequestInfo(
        keyword=QUESTION, location_code=1, language_code="en", tag=TAG
    )
    [refused] = api.chat_gpt_llm_scraper_task_post([bad]).tasks
    assert refused.status_code == 40501 and "location_code" in refused.status_message
    request = SampleRequest(
        sample_id=9,
        idempotency_key=TAG,
        question=QUESTION,
        device="desktop",
        region="us",
        mode="web_search",
        language="tlh",
    )
    with pytest.raises(UpstreamError) as error:
        connector(sim, DataForSEOChatGPTScraper, "chatgpt_web").submit(request)
    assert error.value.error_class is ErrorClass.INVALID and "40501" in error.value.message

    question = "Which CRM failed to answer?"
    sim.script({"match": question, "fault": "task_failed", "platform": "chatgpt_web"})
    task = AiOptimizationChatGptLlmScraperTaskPostRequestInfo(
        keyword=question, location_code=2840, language_code="en", tag="failing"
    )
    [created] = api.chat_gpt_llm_scraper_task_post([task]).tasks
    ours = connector(sim, DataForSEOChatGPTScraper, "chatgpt_web")
    assert ours.poll(created.id).state == "queued"
    assert ours.poll(created.id).state == "completed"  # ended: its answer says how
    raw = raw_of(api.chat_gpt_llm_scraper_task_get_advanced_without_preload_content, created.id)
    client_view = AiOptimizationChatGptLlmScraperTaskGetAdvancedResponseInfo.from_json(raw)
    assert client_view.tasks[0].status_code == 40101 and client_view.tasks[0].result is None
    parsed = DataForSEOChatGPTScraper.parse(raw)
    assert parsed.collection_state == "failed"
    assert parsed.error is not None and parsed.error["class"] == "upstream_failed"
    assert parsed.error["code"] == 40101

    missing = api.chat_gpt_llm_scraper_task_get_advanced("00000000-0000-0000-0000-000000000000")
    assert missing.tasks[0].status_code == 40401
    assert ours.poll("00000000-0000-0000-0000-000000000000").state == "lost"


# The LLM Responses API (the model platforms, resold): engine -> what the client calls it.
LLM_RESPONSES = [
    pytest.param("openai", DataForSEOChatGPTResponses, "chat_gpt", "gpt-4.1-mini",
                 AiOptimizationChatGptLlmResponsesLiveRequestInfo,
                 AiOptimizationChatGptLlmResponsesLiveResponseInfo, id="openai"),
    pytest.param("anthropic", DataForSEOClaudeResponses, "claude", "claude-sonnet-4-5",
                 AiOptimizationClaudeLlmResponsesLiveRequestInfo,
                 AiOptimizationClaudeLlmResponsesLiveResponseInfo, id="anthropic"),
    pytest.param("gemini", DataForSEOGeminiResponses, "gemini", "gemini-2.5-flash",
                 AiOptimizationGeminiLlmResponsesLiveRequestInfo,
                 AiOptimizationGeminiLlmResponsesLiveResponseInfo, id="gemini"),
    pytest.param("perplexity", DataForSEOPerplexityResponses, "perplexity", "sonar",
                 AiOptimizationPerplexityLlmResponsesLiveRequestInfo,
                 AiOptimizationPerplexityLlmResponsesLiveResponseInfo, id="perplexity"),
]  # fmt: skip


@pytest.mark.parametrize(("platform", "cls", "se", "model", "post_model", "get_model"),
                         LLM_RESPONSES)  # fmt: skip
def test_the_client_parses_an_llm_response_and_the_adapter_reads_what_it_exposes(
    sim: SimulatorHandle,
    dfs: ApiClient,
    platform: str,
    cls: type[DataForSEOConnector],
    se: str,
    model: str,
    post_model: Any,
    get_model: Any,
) -> None:
    api = AiOptimizationApi(dfs)
    ours = connector(sim, cls, platform)
    request = SampleRequest(
        sample_id=4,
        idempotency_key=TAG,
        question=QUESTION,
        device="desktop",
        region="us",
        mode="web_search",
        model=model,
    )
    # The request side: the adapter's task is one the client's model takes as it is.
    spec = ours.task_spec(request)
    task = post_model.from_dict(spec)
    assert not task.additional_properties  # every field the adapter sends is documented
    assert {k: v for k, v in task.to_dict().items() if v is not None} == spec
    raw = raw_of(getattr(api, f"{se}_llm_responses_live_without_preload_content"), [task])

    client_view = get_model.from_json(raw)
    assert client_view.status_code == 20000
    [answered] = client_view.tasks
    assert answered.status_code == 20000 and answered.path[-2:] == ["llm_responses", "live"]
    [result] = answered.result
    assert result.model_name == model and result.web_search is True
    [message] = result.items
    assert type(message).__name__ == "MessageAiOptimizationLlmResponseElementItem"
    [section] = message.sections
    parsed = cls.parse(raw, sample_id=4)
    assert parsed.collection_state == "completed"
    assert parsed.answer_text == section.text != ""
    sources = [a.direct_url or a.url for a in section.annotations]
    assert [c.url for c in parsed.citations] == list(dict.fromkeys(sources)) != []
    assert parsed.search_queries == result.fan_out_queries != []
    assert parsed.cost == usd_cents(answered.cost) and answered.cost > result.money_spent > 0
    assert parsed.upstream_id == answered.id

    outcome = ours.submit(request)  # the adapter's own call reads the same
    assert outcome.result is not None and outcome.cost == outcome.result.cost == parsed.cost
