"""Simulated platform protocols, one module each. Which one serves a platform key is part of
the platform's declaration (`Platform.simulator` in connectors/platforms.py, a "module:Class"
string), so production code never imports these modules.

Adding a platform: write `platforms/<name>.py` with a `PlatformProtocol` subclass and name it
in the declaration. The simulator then serves it under `/<platform key>/<the platform's real
path>`. A collection vendor (`VENDORS`) is served the same way under `/<vendor key>/`: one
protocol for every surface it serves, as one real host serves them.
"""

from __future__ import annotations

import importlib

from connectors.platforms import PLATFORMS, VENDORS

from ..protocol import PlatformProtocol


def served_platforms() -> list[str]:
    """Every declared platform key with a protocol of its own, and every vendor key; the
    simulator serves each under `/<key>/`."""
    return sorted([key for key, p in PLATFORMS.items() if p.simulator] + list(VENDORS))


def serves(platform: str) -> bool:
    return platform in VENDORS or bool(platform in PLATFORMS and PLATFORMS[platform].simulator)


def protocol_class(platform: str) -> type[PlatformProtocol]:
    declared = VENDORS[platform].simulator if platform in VENDORS else PLATFORMS[platform].simulator
    module_name, class_name = declared.split(":")
    cls: type[PlatformProtocol] = getattr(importlib.import_module(module_name), class_name)
    return cls
