"""Fixtures for connector tests: one real simulator on 127.0.0.1 per session, reset per test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from connectors.adapters.collector import CollectorConnector
from connectors.adapters.openai_responses import OpenAIResponsesConnector
from connectors.base import ConnectorConfig, SampleRequest
from connectors.simulator import SimulatorHandle, start_simulator
from connectors.simulator.content import DEFAULT_WORLD

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


@pytest.fixture
def openai_connector(simulator: SimulatorHandle) -> Callable[..., OpenAIResponsesConnector]:
    def build(**overrides: Any) -> OpenAIResponsesConnector:
        settings: dict[str, Any] = {
            "platform": "openai",
            "base_url": simulator.url("openai"),
            "api_key": "sk-test-secret-123",
            "model": "gpt-test",
            "timeout_seconds": 5.0,
        }
        return OpenAIResponsesConnector(ConnectorConfig(**(settings | overrides)))

    return build


@pytest.fixture
def collector_connector(simulator: SimulatorHandle) -> Callable[..., CollectorConnector]:
    def build(**overrides: Any) -> CollectorConnector:
        settings: dict[str, Any] = {
            "platform": "collector",
            "base_url": simulator.url("collector"),
            "api_key": "col-test-secret-456",
            "timeout_seconds": 5.0,
        }
        return CollectorConnector(ConnectorConfig(**(settings | overrides)))

    return build


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


# --- doubao / qwen / ollama (imports local to each fixture, so appends do not collide) ---
@pytest.fixture
def doubao_connector(simulator: SimulatorHandle) -> Callable[..., Any]:
    from connectors.adapters.doubao import DoubaoConnector

    def build(**overrides: Any) -> DoubaoConnector:
        settings: dict[str, Any] = {
            "platform": "doubao",
            "base_url": simulator.url("doubao"),
            "api_key": "ark-test-secret-789",
            "model": "doubao-test",
            "timeout_seconds": 5.0,
        }
        return DoubaoConnector(ConnectorConfig(**(settings | overrides)))

    return build


@pytest.fixture
def qwen_connector(simulator: SimulatorHandle) -> Callable[..., Any]:
    from connectors.adapters.qwen import QwenConnector

    def build(**overrides: Any) -> QwenConnector:
        settings: dict[str, Any] = {
            "platform": "qwen",
            "base_url": simulator.url("qwen"),
            "api_key": "sk-dashscope-secret-321",
            "model": "qwen-test",
            "timeout_seconds": 5.0,
        }
        return QwenConnector(ConnectorConfig(**(settings | overrides)))

    return build


@pytest.fixture
def ollama_connector(simulator: SimulatorHandle) -> Callable[..., Any]:
    from connectors.adapters.ollama import OllamaConnector

    def build(**overrides: Any) -> OllamaConnector:
        settings: dict[str, Any] = {
            "platform": "ollama",
            "base_url": simulator.url("ollama"),
            "api_key": "",
            "model": "llama-test",
            "timeout_seconds": 5.0,
        }
        return OllamaConnector(ConnectorConfig(**(settings | overrides)))

    return build


@pytest.fixture
def anthropic_connector(simulator: SimulatorHandle) -> Callable[..., Any]:
    from connectors.adapters.anthropic import AnthropicConnector

    def build(**overrides: Any) -> AnthropicConnector:
        settings: dict[str, Any] = {
            "platform": "anthropic",
            "base_url": simulator.url("anthropic"),
            "api_key": "sk-ant-test-secret-789",
            "model": "claude-test",
            "timeout_seconds": 5.0,
        }
        return AnthropicConnector(ConnectorConfig(**(settings | overrides)))

    return build


@pytest.fixture
def gemini_connector(simulator: SimulatorHandle) -> Callable[..., Any]:
    from connectors.adapters.gemini import GeminiConnector

    def build(**overrides: Any) -> GeminiConnector:
        settings: dict[str, Any] = {
            "platform": "gemini",
            "base_url": simulator.url("gemini"),
            "api_key": "AIza-gemini-test-secret-654",
            "model": "gemini-test",
            "timeout_seconds": 5.0,
        }
        return GeminiConnector(ConnectorConfig(**(settings | overrides)))

    return build


@pytest.fixture
def perplexity_connector(simulator: SimulatorHandle) -> Callable[..., Any]:
    from connectors.adapters.perplexity import PerplexityConnector

    def build(**overrides: Any) -> PerplexityConnector:
        settings: dict[str, Any] = {
            "platform": "perplexity",
            "base_url": simulator.url("perplexity"),
            "api_key": "pplx-test-secret-987",
            "model": "sonar",
            "timeout_seconds": 5.0,
        }
        return PerplexityConnector(ConnectorConfig(**(settings | overrides)))

    return build
