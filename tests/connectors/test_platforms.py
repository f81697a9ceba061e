"""A platform is declared once (connectors/platforms.py): every list of platforms derives from
the declaration, and the hand-written queue lists are checked against it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from connectors.adapters.openai_chat import OpenAIChatConnector
from connectors.base import Connector
from connectors.platforms import (
    PLATFORMS,
    Platform,
    TokenPrice,
    _surface,
    default_models,
    default_sample_prices,
    default_token_prices,
    worker_groups,
    worker_queues,
)
from connectors.registry import (
    UnknownPlatform,
    adapter_class,
    connector_config,
    get_connector,
    known_platforms,
    platform_vendor,
)
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


@pytest.mark.parametrize("key", sorted(k for k, p in PLATFORMS.items() if p.own_api))
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


SURFACES = sorted(k for k, p in PLATFORMS.items() if p.vendors and not p.own_api)


@pytest.mark.parametrize("key", SURFACES)
def test_a_surface_is_served_by_each_of_its_vendors_as_a_platform_of_its_own(key: str) -> None:
    declared = PLATFORMS[key]
    for vendor in declared.vendors:
        with override_settings(GEO_PLATFORMS={key: {"VENDOR": vendor}}):
            connector = get_connector(key)
            assert platform_vendor(key) == vendor
        assert connector.platform == key
        assert connector.capabilities().platform == key
        assert connector.capabilities().asynchronous == (declared.delivery == "provider")
        assert protocol_class(vendor).name == vendor
        # Bright Data's scrapers take a country and never a language: a target naming one
        # is refused (Capabilities.problems); the others list the languages they take.
        assert bool(connector.capabilities().languages) == (vendor != "brightdata")


RESOLD = sorted(k for k, p in PLATFORMS.items() if p.vendors and p.own_api)


def test_the_model_apis_dataforseo_resells_are_exactly_its_llm_responses_engines() -> None:
    assert RESOLD == ["anthropic", "gemini", "openai", "perplexity"]


@pytest.mark.parametrize("key", RESOLD)
def test_a_model_api_stays_direct_unless_a_vendor_is_named(key: str) -> None:
    declared = PLATFORMS[key]
    own = {"API_KEY": "own-model-api-key", "BASE_URL": "https://own.example", "MODEL": "m-2"}
    with override_settings(GEO_PLATFORMS={key: own}, GEO_UPSTREAM_BASE_URL=""):
        assert platform_vendor(key) == ""
        assert type(get_connector(key)).__module__ == declared.adapter.split(":")[0]
        assert connector_config(key).api_key == "own-model-api-key"
    for named in ("", key):  # unset, or naming the platform itself: its own API
        with override_settings(GEO_PLATFORMS={key: {"VENDOR": named}}):
            assert platform_vendor(key) == ""
    vendor_account = {"API_KEY": "login:dfs-secret", "BASE_URL": "https://dfs.example"}
    given = {key: own | {"VENDOR": "dataforseo"}, "dataforseo": vendor_account}
    with override_settings(GEO_PLATFORMS=given, GEO_UPSTREAM_BASE_URL=""):
        assert platform_vendor(key) == "dataforseo"
        connector = get_connector(key)
        served_by = f"{type(connector).__module__}:{type(connector).__name__}"
        assert served_by == declared.vendors["dataforseo"]
        # The vendor's account, never the platform's own key; the platform's model.
        assert connector.config.api_key == "login:dfs-secret"
        assert connector.config.base_url == "https://dfs.example"
        assert connector.config.model == "m-2"
        capabilities = connector.capabilities()
        assert capabilities.platform == key and not capabilities.asynchronous
    with override_settings(GEO_PLATFORMS={key: {"VENDOR": "dataforseo"}},
                           GEO_UPSTREAM_BASE_URL="http://sim:1"):  # fmt: skip
        assert connector_config(key).base_url == "http://sim:1/dataforseo"
    with (
        override_settings(GEO_PLATFORMS={key: {"VENDOR": "serpapi"}}),
        pytest.raises(UnknownPlatform, match=f"GEO_{key.upper()}_VENDOR='serpapi'"),
    ):
        get_connector(key)


def test_every_surface_has_a_vendor_now() -> None:
    unserved = [k for k, p in PLATFORMS.items() if not p.vendors and not p.adapter]
    assert unserved == []
    assert PLATFORMS["copilot_web"].vendors.keys() == {"brightdata"}
    assert PLATFORMS["perplexity_web"].vendors.keys() == {"brightdata"}


def test_a_surface_no_vendor_serves_yet_is_refused_by_name() -> None:
    unserved = _surface("unserved_web", {}, price=(60, 20, 10))
    PLATFORMS[unserved.key] = unserved
    try:
        with pytest.raises(UnknownPlatform, match="unserved_web"):
            get_connector(unserved.key)
    finally:
        del PLATFORMS[unserved.key]


def test_a_vendor_the_surface_does_not_know_is_refused_by_name() -> None:
    refused = pytest.raises(UnknownPlatform, match="GEO_CHATGPT_WEB_VENDOR='nosuch'")
    with override_settings(GEO_PLATFORMS={"chatgpt_web": {"VENDOR": "nosuch"}}), refused:
        get_connector("chatgpt_web")


def test_a_vendors_settings_serve_every_surface_it_serves_unless_the_surface_says_otherwise() -> (
    None
):
    given = {"dataforseo": {"API_KEY": "login:secret", "BASE_URL": "https://dfs.example"},
             "google_ai_mode": {"BASE_URL": "https://mode.example"}}  # fmt: skip
    with override_settings(GEO_PLATFORMS=given, GEO_UPSTREAM_BASE_URL=""):
        assert connector_config("chatgpt_web").base_url == "https://dfs.example"
        assert connector_config("chatgpt_web").api_key == "login:secret"
        assert connector_config("google_ai_mode").base_url == "https://mode.example"
        assert connector_config("google_ai_mode").api_key == "login:secret"
    with override_settings(GEO_PLATFORMS={}, GEO_UPSTREAM_BASE_URL="http://sim:1"):
        assert connector_config("google_ai_overview").base_url == "http://sim:1/dataforseo"
