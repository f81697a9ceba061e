"""A platform is declared once (connectors/platforms.py): every list of platforms derives from
the declaration, and the hand-written queue lists are checked against it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from connectors.adapters.openai_chat import OpenAIChatConnector
from connectors.base import Connector
from connectors.platforms import (
    PLATFORMS,
    Platform,
    TokenPrice,
    default_models,
    default_sample_prices,
    default_token_prices,
    worker_groups,
    worker_queues,
)
from connectors.registry import adapter_class, get_connector, known_platforms
from geo_collect.settings import platform_settings
from simulator import SimulatorHandle
from simulator.platforms import protocol_class, served_platforms, serves
from simulator.platforms.openai_chat import OpenAIChatProtocol
from tests.platform_copies import procfile_problems, readme_problems, systemd_problems

from .contract import result_in, sample

THROWAWAY = Platform(
    key="throwaway",
    adapter="connectors.adapters.openai_chat:OpenAIChatConnector",
    simulator="simulator.platforms.openai_chat:OpenAIChatProtocol",
    default_model="throwaway-model-1",
    sample_prices={"base": 7, "deep_thinking": 3, "screenshot": 10},
    delivery="direct",
    token_price=TokenPrice(currency="USD", input=11, output=22),
)


@pytest.fixture
def throwaway() -> Iterator[Platform]:
    """A platform declared for one test, borrowing the OpenAI chat adapter and protocol."""
    PLATFORMS[THROWAWAY.key] = THROWAWAY
    try:
        yield THROWAWAY
    finally:
        del PLATFORMS[THROWAWAY.key]
        adapter_class.cache_clear()


def test_a_declared_platform_is_in_every_derived_list(throwaway: Platform) -> None:
    assert "platform.throwaway" in worker_queues()
    assert "platform.throwaway" in worker_groups()["direct"]
    assert default_sample_prices()["throwaway"] == {"base": 7, "deep_thinking": 3, "screenshot": 10}
    assert default_models()["throwaway"] == "throwaway-model-1"
    assert default_token_prices()["throwaway-model-1"] == {
        "currency": "USD",
        "input": 11,
        "output": 22,
    }
    assert "throwaway" in known_platforms()
    assert adapter_class("throwaway") is OpenAIChatConnector
    assert "throwaway" in served_platforms()
    assert protocol_class("throwaway") is OpenAIChatProtocol
    assert platform_settings({"GEO_THROWAWAY_API_KEY": "k"}) == {"throwaway": {"API_KEY": "k"}}


def test_a_platform_taken_out_is_in_no_derived_list(throwaway: Platform) -> None:
    del PLATFORMS[throwaway.key]
    adapter_class.cache_clear()
    try:
        assert "platform.throwaway" not in worker_queues()
        assert "throwaway" not in default_sample_prices()
        assert "throwaway" not in known_platforms()
        assert not serves("throwaway")
    finally:
        PLATFORMS[throwaway.key] = throwaway


def test_every_hand_written_queue_list_reports_a_new_platform_missing(
    throwaway: Platform,
) -> None:
    missing = "platform 'throwaway' (queue platform.throwaway) missing"
    assert procfile_problems() == [f"Procfile worker_direct: {missing}"]
    assert systemd_problems() == [f"deploy/systemd/worker-direct.env: {missing}"]
    assert readme_problems() and all(p.endswith(missing) for p in readme_problems())


def test_a_declared_platform_is_served_and_answers_through_its_adapter(
    throwaway: Platform, simulator: SimulatorHandle, settings: Any
) -> None:
    settings.GEO_UPSTREAM_BASE_URL = simulator.base_url
    settings.GEO_PLATFORM_MODELS = default_models()  # as settings.py derives it at start

    connector = get_connector("throwaway")
    outcome = connector.submit(sample("Which cloud provider is best?", mode="no_search"))

    assert connector.config.model == "throwaway-model-1"
    assert result_in(outcome, "completed").answer_text
    assert simulator.stats()["platforms"]["throwaway"]["requests"] == 1


@pytest.mark.parametrize("key", sorted(PLATFORMS))
def test_a_declaration_agrees_with_its_adapter_and_simulator(key: str) -> None:
    declared = PLATFORMS[key]
    connector = get_connector(key)
    capabilities = connector.capabilities()
    assert type(connector).platform == key
    assert capabilities.asynchronous == (declared.delivery == "provider")
    submits_batches = type(connector).submit_batch is not Connector.submit_batch
    assert submits_batches == declared.batch
    assert protocol_class(key).name == key
    assert "base" in declared.sample_prices
    if declared.delivery == "direct":  # a provider reports its own cost
        assert declared.token_price is not None
