"""Fixtures for connector tests: one real simulator on 127.0.0.1 per session, reset per test,
and each platform's connector factory, configured by its row in contract.PLATFORMS."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from connectors.adapters.collector import CollectorConnector
from simulator import SimulatorHandle, start_simulator
from simulator.content import DEFAULT_WORLD

from .contract import BY_ID, connector_factory


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
def collector_connector(simulator: SimulatorHandle) -> Callable[..., CollectorConnector]:
    return connector_factory(
        CollectorConnector, simulator, "collector", api_key="col-test-secret-456"
    )


def _platform_connector(platform_id: str) -> Any:
    """A fixture giving the connector factory of `platform_id`'s row (keywords override)."""

    @pytest.fixture
    def factory(simulator: SimulatorHandle) -> Callable[..., Any]:
        return BY_ID[platform_id].factory(simulator)

    return factory


openai_connector = _platform_connector("openai")
chat_connector = _platform_connector("openai_chat")
anthropic_connector = _platform_connector("anthropic")
gemini_connector = _platform_connector("gemini")
perplexity_connector = _platform_connector("perplexity")
deepseek_connector = _platform_connector("deepseek")
kimi_connector = _platform_connector("kimi")
doubao_connector = _platform_connector("doubao")
qwen_connector = _platform_connector("qwen")
ollama_connector = _platform_connector("ollama")
