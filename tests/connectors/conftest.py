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
