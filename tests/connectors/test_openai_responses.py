"""The OpenAI Responses adapter against the simulator over real HTTP on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable

from connectors.adapters.openai_responses import OpenAIResponsesConnector
from simulator import SimulatorHandle

from .contract import responses_json, sample

Factory = Callable[..., OpenAIResponsesConnector]


def test_request_body_per_mode(simulator: SimulatorHandle, openai_connector: Factory) -> None:
    connector = openai_connector()
    web = connector.request_body(sample("q", region="jp"))
    assert web["tools"] == [
        {"type": "web_search", "user_location": {"type": "approximate", "country": "JP"}}
    ]
    assert web["stream"] is True and web["model"] == "gpt-test"
    assert "tools" not in connector.request_body(sample("q", mode="no_search"))
    assert connector.request_body(sample("q", mode="deep_thinking"))["reasoning"] == {
        "effort": "high"
    }


def test_capabilities_reject_unsupported_targets(openai_connector: Factory) -> None:
    capabilities = openai_connector().capabilities()
    assert (
        capabilities.problems(
            device="api", region="us", mode="web_search", screenshot_policy="none"
        )
        == []
    )
    problems = capabilities.problems(
        device="tablet", region="us", mode="web_search", screenshot_policy="required"
    )
    assert len(problems) == 2
    assert not capabilities.asynchronous and not capabilities.supports_lookup


def test_parse_of_a_failed_json_response() -> None:
    body = responses_json(
        "resp_1", "failed", error={"code": "rate_limit_exceeded", "message": "slow"}
    )
    result = OpenAIResponsesConnector.parse(body, content_type="application/json")
    assert result.collection_state == "failed"
    assert result.error is not None and result.error["class"] == "rate_limited"
    assert result.upstream_id == "resp_1"
