"""Simulated platform protocols, one module each. Which one serves a platform key is part of
the platform's declaration (`Platform.simulator` in connectors/platforms.py, a "module:Class"
string), so production code never imports these modules.

Adding a platform: write `platforms/<name>.py` with a `PlatformProtocol` subclass and name it
in the declaration. The simulator then serves it under `/<platform key>/<the platform's real
path>`.
"""

from __future__ import annotations

import importlib

from connectors.platforms import PLATFORMS

from ..protocol import PlatformProtocol


def served_platforms() -> list[str]:
    """Every declared platform key; the simulator serves each under `/<key>/`."""
    return sorted(PLATFORMS)


def serves(platform: str) -> bool:
    return platform in PLATFORMS


def protocol_class(platform: str) -> type[PlatformProtocol]:
    module_name, class_name = PLATFORMS[platform].simulator.split(":")
    cls: type[PlatformProtocol] = getattr(importlib.import_module(module_name), class_name)
    return cls
