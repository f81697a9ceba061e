"""Which adapter serves which platform key (declared in connectors/platforms.py), and how it
is configured.

Configuration comes from settings (`GEO_PLATFORMS`, built from the GEO_<PLATFORM>_* variables
in geo_collect/settings.py); model names are configuration, never hard-coded aliases.
Credentials are read here, when a connector is built inside a worker, and never travel in queue
messages.

A consumer surface (`Platform.vendors`) is served by the vendor the deployment names in
GEO_<PLATFORM>_VENDOR (default: the first declared). Its settings are the platform's own
GEO_<PLATFORM>_* over the vendor's GEO_<VENDOR>_* (one account for every surface it serves);
in simulator mode its base URL is the simulator's `/<vendor>/` (one host, as the real one).
A model API with its own adapter (openai, ...) is served by a vendor only when
GEO_<PLATFORM>_VENDOR names one; then its account (API_KEY, BASE_URL) is the vendor's alone:
the platform's own GEO_<PLATFORM>_API_KEY is its own API's and never goes to a vendor.
"""

from __future__ import annotations

import importlib
import json
from functools import cache
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from .base import (
    DEFAULT_MAX_RESPONSE_BYTES,
    DEFAULT_MAX_RESPONSE_SECONDS,
    Connector,
    ConnectorConfig,
)
from .platforms import PLATFORMS


class UnknownPlatform(LookupError):
    pass


def known_platforms() -> list[str]:
    return sorted(PLATFORMS)


def platform_vendor(platform: str) -> str:
    """The vendor serving `platform` in this deployment; empty for a platform's own API.
    Raises UnknownPlatform for an unknown platform, for a surface no vendor serves yet, and
    for a configured vendor that does not serve it."""
    try:
        declared = PLATFORMS[platform]
    except KeyError:
        raise UnknownPlatform(
            f"unknown platform {platform!r} (known: {', '.join(known_platforms())})"
        ) from None
    if not declared.vendors and not declared.adapter:
        raise UnknownPlatform(f"platform {platform!r} has no collection vendor that serves it yet")
    if not declared.vendors:
        return ""
    given: dict[str, str] = settings.GEO_PLATFORMS.get(platform, {})
    vendor = given.get("VENDOR", "").strip().lower() or declared.default_vendor
    if declared.own_api and vendor in ("", platform):  # its own API (named, or by default)
        return ""
    if vendor not in declared.vendors:
        raise UnknownPlatform(
            f"GEO_{platform.upper()}_VENDOR={vendor!r} does not serve {platform!r} "
            f"(vendors: {', '.join(declared.vendors)})"
        )
    return vendor


def adapter_class(platform: str) -> type[Connector]:
    vendor = platform_vendor(platform)
    return _import(PLATFORMS[platform].vendors[vendor] if vendor else PLATFORMS[platform].adapter)


def available_platforms() -> list[str]:
    """The known platforms a connector can be built for here (a surface no vendor serves yet
    is left out: a campaign cannot target it)."""
    found: list[str] = []
    for platform in known_platforms():
        try:
            platform_vendor(platform)
        except UnknownPlatform:
            continue
        found.append(platform)
    return found


@cache
def _import(dotted: str) -> type[Connector]:
    module_name, class_name = dotted.split(":")
    cls: type[Connector] = getattr(importlib.import_module(module_name), class_name)
    return cls


# A model API's own account, which a vendor serving that platform must not be given.
_ACCOUNT_SETTINGS = ("API_KEY", "BASE_URL")


def _settings_of(platform: str, vendor: str) -> dict[str, str]:
    """The platform's GEO_<PLATFORM>_* over its vendor's GEO_<VENDOR>_*; for a model API
    served by a vendor, without its own account (API_KEY, BASE_URL: those of its own API)."""
    own: dict[str, str] = settings.GEO_PLATFORMS.get(platform, {})
    if not vendor:
        return own
    shared: dict[str, str] = settings.GEO_PLATFORMS.get(vendor, {})
    if PLATFORMS[platform].own_api:
        own = {name: value for name, value in own.items() if name not in _ACCOUNT_SETTINGS}
    return shared | own


def configured_model(platform: str) -> str | None:
    """The model the deployment is configured to ask on `platform` now. A run freezes it in
    its config snapshot at launch, so a later change of configuration never changes a run
    mid-way (sampling.services.plan_run, pipeline.execution)."""
    given: dict[str, str] = settings.GEO_PLATFORMS.get(platform, {})
    return given.get("MODEL") or settings.GEO_PLATFORM_MODELS.get(platform)


def connector_config(platform: str) -> ConnectorConfig:
    cls = adapter_class(platform)
    vendor = platform_vendor(platform)
    given = _settings_of(platform, vendor)
    simulator = settings.GEO_UPSTREAM_BASE_URL
    base_url = given.get("BASE_URL") or (
        f"{simulator.rstrip('/')}/{vendor or platform}"
        if simulator
        else getattr(cls, "default_base_url", "")
    )
    # "direct,http://proxy:3128": attempts alternate between these egress paths.
    egress = [p.strip() for p in given.get("EGRESS", "").split(",") if p.strip()]
    proxies = tuple(None if p == "direct" else p for p in egress)
    return ConnectorConfig(
        platform=platform,
        base_url=base_url,
        api_key=given.get("API_KEY", "sim-key" if simulator else ""),
        model=configured_model(platform),
        timeout_seconds=float(given.get("TIMEOUT", "60")),
        egress_proxies=proxies or (None,),
        extra=_extra(platform, given),
        max_response_bytes=int(given.get("MAX_RESPONSE_BYTES", DEFAULT_MAX_RESPONSE_BYTES)),
        max_response_seconds=float(given.get("MAX_RESPONSE_SECONDS", DEFAULT_MAX_RESPONSE_SECONDS)),
    )


def _extra(platform: str, given: dict[str, str]) -> dict[str, Any]:
    """Adapter options (`GEO_<PLATFORM>_EXTRA`, a JSON object: e.g. Doubao's `bot_id`, an
    OpenAI-compatible endpoint's `chat_path`) and the provider callback URL."""
    variable = f"GEO_{platform.upper()}_EXTRA"
    raw = given.get("EXTRA", "")
    try:
        extra: dict[str, Any] = json.loads(raw) if raw else {}
    except json.JSONDecodeError as error:
        raise ImproperlyConfigured(f"{variable} is not valid JSON: {error.msg}") from None
    if not isinstance(extra, dict):
        raise ImproperlyConfigured(f"{variable} must be a JSON object")
    if given.get("CALLBACK_URL"):
        extra["callback_url"] = given["CALLBACK_URL"]
    return extra


def get_connector(platform: str) -> Connector:
    return adapter_class(platform)(connector_config(platform))
