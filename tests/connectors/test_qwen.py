"""The DashScope (Qwen) native adapter against the simulator over real HTTP on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import requests

from connectors.adapters.qwen import PATH, QwenConnector
from connectors.base import ErrorClass
from simulator import SimulatorHandle

from .contract import cite_everything, sample

Factory = Callable[..., QwenConnector]


def _intended(simulator: SimulatorHandle) -> dict[str, Any]:
    return simulator.answers("qwen")[-1]


@pytest.mark.parametrize(
    "question", ["Which cloud provider is best for startups?", "哪家云服务最适合初创公司？"]
)
def test_markers_stay_in_the_text_and_unmarked_results_are_sources_without_offsets(
    simulator: SimulatorHandle, qwen_connector: Factory, question: str
) -> None:
    cite_everything(simulator)
    outcome = qwen_connector().submit(sample(question, region="cn"))
    result = outcome.result
    intended = _intended(simulator)
    assert result is not None and "[1]" in result.answer_text  # markers kept as written
    spans = [(c.start, c.end) for c in result.citations if c.start is not None]
    assert spans == [(c["start"], c["end"]) for c in intended["citations"]]
    # A search result no marker refers to is still a source, without offsets.
    extra = [c for c in result.citations if c.start is None]
    assert len(extra) == 1 and extra[0].end is None and extra[0].url.endswith("/Cloud_computing")
    assert outcome.upstream_id == outcome.request_id  # DashScope has no other id
    assert f'"request_id":"{outcome.request_id}"'.encode() in result.raw


def test_no_search_answer_has_no_markers(
    simulator: SimulatorHandle, qwen_connector: Factory
) -> None:
    cite_everything(simulator)
    result = qwen_connector().submit(sample("offline", region="cn", mode="no_search")).result
    assert result is not None and "[1]" not in result.answer_text


def test_cumulative_frames_without_incremental_output_parse_the_same(
    simulator: SimulatorHandle, qwen_connector: Factory
) -> None:
    cite_everything(simulator)
    body = qwen_connector().request_body(sample("cumulative please", region="cn"))
    body["parameters"]["incremental_output"] = False
    response = requests.post(
        f"{simulator.url('qwen')}{PATH}",
        json=body,
        headers={"Authorization": "Bearer k", "X-DashScope-SSE": "enable"},
        timeout=5,
    )
    result = QwenConnector.parse(response.content, content_type=response.headers["content-type"])
    assert result.collection_state == "completed"
    assert result.answer_text == _intended(simulator)["answer_text"]
    assert result.request_id == response.headers["x-request-id"]  # the body's, the same value


def test_simulator_rejects_a_missing_key_and_a_missing_model(simulator: SimulatorHandle) -> None:
    url = f"{simulator.url('qwen')}{PATH}"
    no_key = requests.post(url, json={"model": "m"}, timeout=5)
    assert no_key.status_code == 401 and no_key.json()["code"] == "InvalidApiKey"
    no_model = requests.post(url, json={}, headers={"Authorization": "Bearer k"}, timeout=5)
    assert no_model.status_code == 400 and no_model.json()["code"] == "InvalidParameter"
    error = QwenConnector._http_error(400, {}, no_model.content, "direct")
    assert error.error_class is ErrorClass.INVALID


def test_request_body_per_mode(qwen_connector: Factory) -> None:
    connector = qwen_connector()
    web = connector.request_body(sample("q", region="cn"))
    assert web["model"] == "qwen-test"
    assert web["input"] == {"messages": [{"role": "user", "content": "q"}]}
    assert web["parameters"]["enable_search"] is True
    assert web["parameters"]["incremental_output"] is True
    assert web["parameters"]["search_options"]["citation_format"] == "[<number>]"
    assert (
        "enable_search" not in connector.request_body(sample("q", mode="no_search"))["parameters"]
    )
    thinking = connector.request_body(sample("q", mode="deep_thinking"))["parameters"]
    assert thinking["enable_thinking"] is True and thinking["enable_search"] is True


def test_capabilities(qwen_connector: Factory) -> None:
    capabilities = qwen_connector().capabilities()
    ok = capabilities.problems(
        device="desktop", region="cn", mode="deep_thinking", screenshot_policy="none"
    )
    assert ok == []
    assert capabilities.problems(
        device="desktop", region="cn", mode="web_search", screenshot_policy="required"
    )
    assert not capabilities.asynchronous and not capabilities.supports_lookup


def test_a_marker_without_a_source_is_flagged_and_finish_length_fails() -> None:
    frame = {
        "output": {
            "choices": [{"finish_reason": "length", "message": {"content": "Acme is fast.[7]"}}],
            "search_info": {"search_results": [{"index": 1, "url": "https://a.example/"}]},
        },
        "request_id": "r-1",
    }
    raw = f"id:1\nevent:result\n:HTTP_STATUS/200\ndata:{json.dumps(frame)}\n\n".encode()
    result = QwenConnector.parse(raw)
    assert result.collection_state == "failed"
    assert result.error is not None and result.error["class"] == "upstream_failed"
    assert "UNRESOLVED_CITATION_MARKER" in result.warnings
    assert [(c.url, c.start) for c in result.citations] == [("https://a.example/", None)]
