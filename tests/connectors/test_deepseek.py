"""Contract tests: DeepSeek's classic chat API against the simulator over real HTTP."""

from __future__ import annotations

import json
from collections.abc import Callable

import requests

from connectors.adapters.deepseek import DeepSeekConnector
from simulator import SimulatorHandle

from .contract import sample

Factory = Callable[..., DeepSeekConnector]


def _intended(simulator: SimulatorHandle) -> dict:
    return simulator.answers("deepseek")[-1]


def test_deep_thinking_keeps_the_reasoning_out_of_the_answer(
    simulator: SimulatorHandle, deepseek_connector: Factory
) -> None:
    connector = deepseek_connector()
    assert connector.request_body(sample("q", mode="deep_thinking"))["thinking"] == {
        "type": "enabled"
    }
    assert connector.request_body(sample("q", mode="no_search"))["thinking"] == {"type": "disabled"}
    result = connector.submit(sample("think about CRMs", mode="deep_thinking")).result
    intended = _intended(simulator)
    assert result is not None and result.collection_state == "completed"
    assert intended["reasoning"] and intended["reasoning"][:20] not in result.answer_text
    assert result.answer_text == intended["answer_text"]
    assert b'"reasoning_content": "' in result.raw  # the chain of thought stays in the raw
    again = DeepSeekConnector.parse(result.raw)  # a re-parse drops it again
    assert (again.answer_text, again.collection_state) == (result.answer_text, "completed")


def test_thinking_model_comes_from_configuration(deepseek_connector: Factory) -> None:
    connector = deepseek_connector(extra={"thinking_model": "deepseek-reasoner"})
    assert connector.request_body(sample("q", mode="deep_thinking"))["model"] == "deepseek-reasoner"
    assert connector.request_body(sample("q", mode="no_search"))["model"] == "deepseek-chat"


def test_web_search_is_rejected_at_plan_time(deepseek_connector: Factory) -> None:
    capabilities = deepseek_connector().capabilities()
    problems = capabilities.problems(
        device="desktop", region="cn", mode="web_search", screenshot_policy="optional"
    )
    assert len(problems) == 1 and "web_search" in problems[0]
    assert (
        capabilities.problems(
            device="desktop", region="cn", mode="deep_thinking", screenshot_policy="optional"
        )
        == []
    )
    assert not capabilities.screenshots and not capabilities.supports_lookup


def test_non_streaming_body_padded_with_blank_lines_parses(simulator: SimulatorHandle) -> None:
    response = requests.post(
        f"{simulator.url('deepseek')}/chat/completions",
        json={"model": "deepseek-reasoner", "messages": [{"role": "user", "content": "json"}]},
        headers={"Authorization": "Bearer sk-1"},
        timeout=5,
    )
    assert response.content.startswith(b"\n\n{")
    result = DeepSeekConnector.parse(
        response.content, content_type=response.headers["content-type"]
    )
    assert result.collection_state == "completed"
    assert result.answer_text == _intended(simulator)["answer_text"]
    assert json.loads(response.content)["choices"][0]["message"]["reasoning_content"]


def test_simulator_rejects_unknown_tool_types_with_422(simulator: SimulatorHandle) -> None:
    response = requests.post(
        f"{simulator.url('deepseek')}/v1/chat/completions",
        json={"model": "deepseek-chat", "messages": [{"role": "user", "content": "q"}],
              "tools": [{"type": "deepseek_web_search"}]},
        headers={"Authorization": "Bearer sk-1"},
        timeout=5,
    )  # fmt: skip
    assert response.status_code == 422
