from __future__ import annotations

import os
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from connectors.registry import (
    UnknownPlatform,
    available_platforms,
    connector_config,
    get_connector,
    known_platforms,
)
from geo_collect.settings import platform_settings


def test_every_registered_platform_builds_and_declares_capabilities(settings: Any) -> None:
    for platform in available_platforms():  # known, less the surfaces no vendor serves yet
        capabilities = get_connector(platform).capabilities()
        assert capabilities.platform == platform
        assert capabilities.submission_limit > 0
    assert set(known_platforms()) == set(settings.GEO_PLATFORM_MODELS)  # each has settings


def test_configuration_comes_from_the_environment(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GEO_DOUBAO_API_KEY", "ark-secret")
    monkeypatch.setenv("GEO_DOUBAO_MODEL", "doubao-x")
    monkeypatch.setenv("GEO_DOUBAO_EXTRA", '{"bot_id": "bot-1"}')
    monkeypatch.setenv("GEO_DOUBAO_EGRESS", "direct, http://127.0.0.1:3128")
    settings.GEO_PLATFORMS = platform_settings(os.environ)  # as settings.py reads them

    config = connector_config("doubao")

    assert (config.api_key, config.model, config.extra) == (
        "ark-secret",
        "doubao-x",
        {"bot_id": "bot-1"},
    )
    assert config.egress_proxies == (None, "http://127.0.0.1:3128")
    assert "ark-secret" not in repr(config)


def test_bad_adapter_options_name_the_variable(settings: Any) -> None:
    settings.GEO_PLATFORMS = platform_settings({"GEO_QWEN_EXTRA": "{not json"})
    with pytest.raises(ImproperlyConfigured, match="GEO_QWEN_EXTRA is not valid JSON"):
        connector_config("qwen")


def test_an_unknown_platform_is_named() -> None:
    with pytest.raises(UnknownPlatform, match="unknown platform 'bing'"):
        get_connector("bing")
