"""Helpers the platform contract tests (test_<platform>.py) share.

Each test module keeps its own assertions; what lives here is only the set-up and the
comparison helpers that were the same in every one of them.
"""

from __future__ import annotations

from typing import Any

from connectors.base import NormalizedResult
from connectors.retry import RetryPolicy
from connectors.simulator import SimulatorHandle

from .conftest import CITED_WORLD

# The retry policy the contract tests judge classified errors by.
POLICY = RetryPolicy(max_attempts=3, base=0.5, max_delay=10, max_total_seconds=60)
CITED_PROFILE: dict[str, Any] = {"emoji_rate": 1.0, "citation_rate": 1.0}


def cite_everything(simulator: SimulatorHandle, **profile: Any) -> None:
    """Every brand mentioned and cited, with emoji, so offset tests always have spans."""
    simulator.configure(world=CITED_WORLD, profile=CITED_PROFILE | profile)


def comparable(result: NormalizedResult, *envelope: str) -> dict[str, Any]:
    """The JSON form without the capture time and the named HTTP-envelope fields."""
    data = result.to_json()
    for name in ("captured_at", *envelope):
        data.pop(name)
    return data
