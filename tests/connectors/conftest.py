"""Fixtures for connector tests: one real simulator on 127.0.0.1 per session, reset per test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from connectors.adapters.anthropic import AnthropicConnector
from connectors.adapters.collector import CollectorConnector
from connectors.adapters.doubao import DoubaoConnector
from connectors.adapters.gemini import GeminiConnector
from connectors.adapters.ollama import OllamaConnector
from connectors.adapters.openai_responses import OpenAIResponsesConnector
from connectors.adapters.perplexity import PerplexityConnector
from connectors.adapters.qwen import QwenConnector
from connectors.base import Connector, ConnectorConfig, SampleRequest
from connectors.simulator import SimulatorHandle, start_simulator
from connectors.simulator.content import DEFAULT_WORLD

C = TypeVar("C", bound=Connector)

# Every brand is mentioned and cited, so offset tests always have spans to check.
CITED_WORLD = [
    {"name": "Acme Cloud", "aliases": ["Acme"], "domains": ["acme.example"], "mention_rate": 1.0},
    {"name": "Globex", "aliases": ["环球"], "domains": ["globex.example"], "mention_rate": 1.0},
    {"name": "Initech", "domains": ["initech.example"], "mention_rate": 1.0},
]


@pytest.fixture(scope="session")
def simulator_server() -> Iterator[SimulatorHandle]:
    handle = start_simulator(seed=0)
    yield handle
    handle.stop()


@pytest.fixture
def simulator(simulator_server: SimulatorHandle) -> SimulatorHandle:
    simulator_server.reset()
    simulator_server.configure(seed=0, world=DEFAULT_WORLD, profile={})
    return simulator_server


def connector_factory(
    cls: type[C], simulator: SimulatorHandle, platform: str, **defaults: Any
) -> Callable[..., C]:
    """Builds `cls` pointed at the simulator's `platform`; keyword arguments override the
    configuration (`defaults`, then a 5 s timeout)."""

    def build(**overrides: Any) -> C:
        settings: dict[str, Any] = {
            "platform": platform,
            "base_url": simulator.url(platform),
            "timeout_seconds": 5.0,
        }
        return cls(ConnectorConfig(**(settings | defaults | overrides)))

    return build


@pytest.fixture
def openai_connector(simulator: SimulatorHandle) -> Callable[..., OpenAIResponsesConnector]:
    return connector_factory(
        OpenAIResponsesConnector,
        simulator,
        "openai",
        api_key="sk-test-secret-123",
        model="gpt-test",
    )


@pytest.fixture
def collector_connector(simulator: SimulatorHandle) -> Callable[..., CollectorConnector]:
    return connector_factory(
        CollectorConnector, simulator, "collector", api_key="col-test-secret-456"
    )


def sample(
    question: str,
    *,
    key: str | None = None,
    sample_id: int = 1,
    device: str = "desktop",
    region: str = "us",
    mode: str = "web_search",
    screenshot: bool = False,
) -> SampleRequest:
    return SampleRequest(
        sample_id=sample_id,
        idempotency_key=key or f"key-{sample_id}-{question}",
        question=question,
        device=device,
        region=region,
        mode=mode,
        screenshot=screenshot,
    )


@pytest.fixture
def doubao_connector(simulator: SimulatorHandle) -> Callable[..., DoubaoConnector]:
    return connector_factory(
        DoubaoConnector, simulator, "doubao", api_key="ark-test-secret-789", model="doubao-test"
    )


@pytest.fixture
def qwen_connector(simulator: SimulatorHandle) -> Callable[..., QwenConnector]:
    return connector_factory(
        QwenConnector, simulator, "qwen", api_key="sk-dashscope-secret-321", model="qwen-test"
    )


@pytest.fixture
def ollama_connector(simulator: SimulatorHandle) -> Callable[..., OllamaConnector]:
    return connector_factory(OllamaConnector, simulator, "ollama", api_key="", model="llama-test")


@pytest.fixture
def anthropic_connector(simulator: SimulatorHandle) -> Callable[..., AnthropicConnector]:
    return connector_factory(
        AnthropicConnector,
        simulator,
        "anthropic",
        api_key="sk-ant-test-secret-789",
        model="claude-test",
    )


@pytest.fixture
def gemini_connector(simulator: SimulatorHandle) -> Callable[..., GeminiConnector]:
    return connector_factory(
        GeminiConnector,
        simulator,
        "gemini",
        api_key="AIza-gemini-test-secret-654",
        model="gemini-test",
    )


@pytest.fixture
def perplexity_connector(simulator: SimulatorHandle) -> Callable[..., PerplexityConnector]:
    return connector_factory(
        PerplexityConnector, simulator, "perplexity", api_key="pplx-test-secret-987", model="sonar"
    )
