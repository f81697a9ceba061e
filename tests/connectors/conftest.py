"""Fixtures for connector tests: one real simulator on 127.0.0.1 per session, reset per test,
and each platform's connector factory, configured by its row in contract.PLATFORMS."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from connectors.adapters.collector import CollectorConnector
from connectors.simulator import SimulatorHandle, start_simulator
from connectors.simulator.content import DEFAULT_WORLD

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


@pytest.fixture
def openai_connector(simulator: SimulatorHandle) -> Callable[..., Any]:
    return BY_ID["openai"].factory(simulator)


@pytest.fixture
def doubao_connector(simulator: SimulatorHandle) -> Callable[..., Any]:
    return BY_ID["doubao"].factory(simulator)


@pytest.fixture
def qwen_connector(simulator: SimulatorHandle) -> Callable[..., Any]:
    return BY_ID["qwen"].factory(simulator)


@pytest.fixture
def ollama_connector(simulator: SimulatorHandle) -> Callable[..., Any]:
    return BY_ID["ollama"].factory(simulator)


@pytest.fixture
def anthropic_connector(simulator: SimulatorHandle) -> Callable[..., Any]:
    return BY_ID["anthropic"].factory(simulator)


@pytest.fixture
def gemini_connector(simulator: SimulatorHandle) -> Callable[..., Any]:
    return BY_ID["gemini"].factory(simulator)


@pytest.fixture
def perplexity_connector(simulator: SimulatorHandle) -> Callable[..., Any]:
    return BY_ID["perplexity"].factory(simulator)


@pytest.fixture
def chat_connector(simulator: SimulatorHandle) -> Callable[..., Any]:
    return BY_ID["openai_chat"].factory(simulator)


@pytest.fixture
def deepseek_connector(simulator: SimulatorHandle) -> Callable[..., Any]:
    return BY_ID["deepseek"].factory(simulator)


@pytest.fixture
def kimi_connector(simulator: SimulatorHandle) -> Callable[..., Any]:
    return BY_ID["kimi"].factory(simulator)
