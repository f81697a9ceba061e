"""The searches an engine ran (query fan-out) and the sources it found but did not cite, as
each adapter reads them from its protocol."""

from __future__ import annotations

import json

from connectors.adapters.anthropic import AnthropicConnector
from connectors.adapters.brightdata import BrightDataChatGPT
from connectors.adapters.dataforseo import (
    DataForSEOAIMode,
    DataForSEOAIOverview,
    DataForSEOChatGPTScraper,
)
from connectors.adapters.gemini import GeminiConnector
from connectors.adapters.openai_responses import OpenAIResponsesConnector
from connectors.adapters.perplexity import PerplexityConnector
from connectors.adapters.serpapi import SerpApiAIMode
from connectors.citations import found_sources, make_citation, search_queries


def _sse(events: list[tuple[str, dict[str, object]]]) -> bytes:
    return "".join(
        f"event: {kind}\ndata: {json.dumps({'type': kind} | payload)}\n\n"
        for kind, payload in events
    ).encode()


def test_search_queries_are_stripped_deduplicated_and_kept_in_order() -> None:
    assert search_queries([" crm pricing ", None, "", "crm reviews", "crm pricing", 3]) == [
        "crm pricing",
        "crm reviews",
    ]


def test_found_sources_skip_what_is_cited_even_with_tracking_parameters() -> None:
    cited = [make_citation(1, "https://acme.example/pricing")]
    found = found_sources(
        cited,
        [("https://acme.example/pricing?utm_source=openai", None), ("https://g2.com/x", "G2"),
         ("https://g2.com/x", "G2 again"), ("", None)],
    )  # fmt: skip
    assert [(c.id, c.url, c.title) for c in found] == [("f1", "https://g2.com/x", "G2")]


def test_openai_web_search_calls_give_queries_and_uncited_sources() -> None:
    body = {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "output": [
            {"type": "web_search_call", "id": "ws_1", "status": "completed",
             "action": {"type": "search", "query": "best crm", "queries": ["best crm", "crm 2025"],
                        "sources": [{"type": "url", "url": "https://acme.example/"},
                                    {"type": "url", "url": "https://g2.com/crm"}]}},
            {"type": "web_search_call", "id": "ws_2", "status": "completed",
             "action": {"type": "open_page", "url": "https://acme.example/"}},
            {"type": "message", "id": "m", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "Acme.", "annotations": [
                 {"type": "url_citation", "url": "https://acme.example/", "title": "Acme",
                  "start_index": 0, "end_index": 5}]}]},
        ],
    }  # fmt: skip
    result = OpenAIResponsesConnector.parse(json.dumps(body).encode())
    assert result.search_queries == ["best crm", "crm 2025"]
    assert [c.url for c in result.citations] == ["https://acme.example/"]
    assert [c.url for c in result.found] == ["https://g2.com/crm"]


def test_openai_cut_stream_keeps_the_searches_already_done() -> None:
    call = {"type": "web_search_call", "id": "ws_1", "status": "completed",
            "action": {"type": "search", "query": "best crm"}}  # fmt: skip
    raw = _sse([
        ("response.created", {"response": {"id": "resp_1", "status": "in_progress"}}),
        ("response.output_item.done", {"output_index": 0, "item": call}),
        ("response.output_text.delta", {"output_index": 1, "content_index": 0, "delta": "Ac"}),
    ])  # fmt: skip
    result = OpenAIResponsesConnector.parse(raw)
    assert result.collection_state == "truncated"
    assert result.search_queries == ["best crm"]


def test_gemini_web_search_queries_and_unsupported_chunks() -> None:
    body = {
        "responseId": "r1",
        "candidates": [{
            "content": {"parts": [{"text": "Acme is good."}]},
            "finishReason": "STOP",
            "groundingMetadata": {
                "webSearchQueries": ["best crm", "crm reviews"],
                "groundingChunks": [{"web": {"uri": "https://acme.example/", "title": "acme"}},
                                    {"web": {"uri": "https://g2.com/crm", "title": "g2.com"}}],
                "groundingSupports": [{"segment": {"endIndex": 13, "text": "Acme is good."},
                                       "groundingChunkIndices": [0]}],
            },
        }],
    }  # fmt: skip
    result = GeminiConnector.parse(json.dumps(body).encode())
    assert result.search_queries == ["best crm", "crm reviews"]
    assert [c.url for c in result.citations] == ["https://acme.example/"]
    assert [(c.url, c.title) for c in result.found] == [("https://g2.com/crm", "g2.com")]


def test_anthropic_streamed_tool_input_gives_the_query() -> None:
    tool = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
    results = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": [
        {"type": "web_search_result", "url": "https://acme.example/", "title": "Acme"},
        {"type": "web_search_result", "url": "https://g2.com/crm", "title": "G2"}]}  # fmt: skip
    citation = {"type": "web_search_result_location", "url": "https://acme.example/",
                "title": "Acme", "cited_text": "x"}  # fmt: skip
    raw = _sse([
        ("message_start", {"message": {"id": "msg_1"}}),
        ("content_block_start", {"index": 0, "content_block": tool}),
        ("content_block_delta", {"index": 0, "delta": {"type": "input_json_delta",
                                                       "partial_json": '{"query": "be'}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "input_json_delta",
                                                       "partial_json": 'st crm"}'}}),
        ("content_block_start", {"index": 1, "content_block": results}),
        ("content_block_start", {"index": 2, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"index": 2, "delta": {"type": "citations_delta",
                                                       "citation": citation}}),
        ("content_block_delta", {"index": 2, "delta": {"type": "text_delta", "text": "Acme."}}),
        ("message_delta", {"delta": {"stop_reason": "end_turn"}}),
        ("message_stop", {}),
    ])  # fmt: skip
    result = AnthropicConnector.parse(raw)
    assert result.collection_state == "completed"
    assert result.search_queries == ["best crm"]
    assert [c.url for c in result.found] == ["https://g2.com/crm"]


def test_perplexity_search_results_without_a_marker_are_found_not_cited() -> None:
    body = {
        "id": "p1",
        "object": "chat.completion",
        "search_results": [{"url": "https://acme.example/", "title": "Acme"},
                           {"url": "https://g2.com/crm", "title": "G2"}],
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "Acme is good.[1]"}}],
    }  # fmt: skip
    result = PerplexityConnector.parse(json.dumps(body).encode())
    assert [c.url for c in result.citations] == ["https://acme.example/"]
    assert [(c.url, c.title) for c in result.found] == [("https://g2.com/crm", "G2")]
    assert result.search_queries == []


def test_bright_data_records_give_searches_and_sources_read_but_not_cited() -> None:
    """The ChatGPT scraper's documented record (their "Search by Prompt" example) with a
    Perplexity-style `web_search_query`: `search_sources` the answer does not cite are found."""
    record = {
        "url": "https://chatgpt.com/?q=Top%20hotels%20in%20New%20York",
        "prompt": "Top hotels in New York",
        "answer_text": "Here are some of the top-rated hotels in New York City...",
        "answer_text_markdown": "## Top Hotels in New York City\n\n1. **The Plaza**",
        "web_search_triggered": True,
        "citations": [{"title": "Best Hotels in NYC 2024",
                       "url": "https://www.travelandleisure.com/best-hotels-nyc", "position": 1}],
        "search_sources": [
            {"url": "https://www.travelandleisure.com/best-hotels-nyc?utm_source=chatgpt.com",
             "title": "Best Hotels in NYC"},
            {"url": "https://www.cntraveler.com/nyc", "title": "NYC hotels"},
        ],
        "web_search_query": ["top hotels new york", " top hotels new york ", "plaza reviews"],
        "index": 1,
    }  # fmt: skip
    result = BrightDataChatGPT.parse(json.dumps([record]).encode())
    assert result.answer_text == record["answer_text_markdown"]
    assert [(c.id, c.url) for c in result.citations] == [
        ("c1", "https://www.travelandleisure.com/best-hotels-nyc")
    ]
    assert [(c.id, c.url, c.title) for c in result.found] == [
        ("f1", "https://www.cntraveler.com/nyc", "NYC hotels")
    ]
    assert result.search_queries == ["top hotels new york", "plaza reviews"]


def _dataforseo(result: dict[str, object]) -> bytes:
    task = {"id": "t1", "status_code": 20000, "status_message": "Ok.", "cost": 0,
            "result": [result]}  # fmt: skip
    return json.dumps({"status_code": 20000, "tasks": [task]}).encode()


def test_dataforseo_chatgpt_fan_out_queries_and_search_results_not_among_its_sources() -> None:
    raw = _dataforseo({
        "markdown": "Acme is good.",
        "sources": [{"url": "https://acme.example/", "title": "Acme"}],
        "search_results": [{"url": "https://acme.example/?utm_source=chatgpt.com", "title": "A"},
                           {"url": "https://g2.com/crm", "title": "G2"}],
        "fan_out_queries": ["best crm", " crm reviews ", "best crm"],
    })  # fmt: skip
    result = DataForSEOChatGPTScraper.parse(raw)
    assert result.search_queries == ["best crm", "crm reviews"]
    assert [c.url for c in result.citations] == ["https://acme.example/"]
    assert [(c.id, c.url, c.title) for c in result.found] == [("f1", "https://g2.com/crm", "G2")]


def test_dataforseo_google_cites_what_an_element_rests_on_and_finds_the_rest_of_the_list() -> None:
    acme = {"url": "https://acme.example/", "source": "Acme"}
    g2 = {"url": "https://g2.com/crm", "title": "G2"}
    overview = {"type": "ai_overview", "markdown": "Acme is good.",
                "items": [{"type": "ai_overview_element", "text": "Acme is good.",
                           "references": [acme]}],
                "references": [acme, g2]}  # fmt: skip
    result = DataForSEOAIMode.parse(_dataforseo({"items": [overview]}))
    assert [c.url for c in result.citations] == ["https://acme.example/"]
    assert [(c.url, c.title) for c in result.found] == [("https://g2.com/crm", "G2")]
    assert result.search_queries == []

    # Elements without references: the overview's list is all that says what was used.
    overview["items"] = [{"type": "ai_overview_element", "text": "Acme is good."}]
    result = DataForSEOAIOverview.parse(_dataforseo({"items": [overview]}))
    assert [c.url for c in result.citations] == ["https://acme.example/", "https://g2.com/crm"]
    assert result.found == []


def test_serpapi_references_no_block_points_at_are_found_not_cited() -> None:
    body = {
        "search_metadata": {"id": "s1", "status": "Success"},
        "search_parameters": {"engine": "google_ai_mode"},
        "text_blocks": [{"type": "paragraph", "snippet": "Acme is good.",
                         "reference_indexes": [0]}],
        "references": [{"index": 0, "link": "https://acme.example/", "title": "Acme"},
                       {"index": 1, "link": "https://g2.com/crm", "title": "G2"}],
    }  # fmt: skip
    result = SerpApiAIMode.parse(json.dumps(body).encode())
    assert [c.url for c in result.citations] == ["https://acme.example/"]
    assert [(c.id, c.url, c.title) for c in result.found] == [("f1", "https://g2.com/crm", "G2")]
    assert result.search_queries == []
