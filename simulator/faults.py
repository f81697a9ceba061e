"""Fault profiles (random rates) and scripts (explicit faults for tests).

Profile (JSON, every key optional):
    {"rates": {"rate_limit": 0.05, "server_error": 0.02, "truncate": 0.01, ...},
     "latency_ms": [0, 50], "hang_seconds": 30, "retry_after_seconds": 1.5,
     "emoji_rate": 0.3, "cjk_rate": 0.1, "citation_rate": 0.8, "chunk_delay_ms": 0,
     "collector": {"polls_until_done": 2, "cost_minor": [20, 60], "currency": "USD",
                   "callback_delay_seconds": 0.05, "callback_secret": "sim-callback-secret"},
     "platforms": {"openai": {"rates": {...}, ...}}}   # per-platform overrides, merged
Script entry:
    {"match": "substring of the question", "fault": "rate_limit", "times": 1,
     "platform": "openai" (optional), "params": {"retry_after_seconds": 2}}
`times` counts matching calls the fault applies to (null = every call), so a script of one
429 lets the retry of the same question succeed.

Fault names (each protocol declares which it implements): rate_limit, server_error,
overloaded, hang, auth_error, login_page, error_page, truncate, midstream_error;
collector tasks: lose, task_failed, task_rejected (refused inside an accepted batch),
screenshot_missing, screenshot_late (missing from the first result fetch only),
duplicate_callback.
"""

from __future__ import annotations

import copy
import random
from dataclasses import asdict, dataclass, field
from typing import Any

HTTP_FAULTS = frozenset(
    {"rate_limit", "server_error", "overloaded", "hang", "auth_error", "login_page", "error_page"}
)
STREAM_FAULTS = frozenset({"truncate", "midstream_error"})
TASK_FAULTS = frozenset(
    {
        "lose",
        "task_failed",
        "task_rejected",
        "screenshot_missing",
        "screenshot_late",
        "duplicate_callback",
    }
)
ALL_FAULTS = HTTP_FAULTS | STREAM_FAULTS | TASK_FAULTS

DEFAULT_PROFILE: dict[str, Any] = {
    "rates": {},
    "latency_ms": [0, 0],
    "hang_seconds": 30.0,
    "retry_after_seconds": 1.0,
    "emoji_rate": 0.3,
    "cjk_rate": 0.1,
    "citation_rate": 0.8,
    "chunk_delay_ms": 0,
    "collector": {
        "polls_until_done": 2,
        "cost_minor": [20, 60],
        "currency": "USD",
        "callback_delay_seconds": 0.05,
        "callback_secret": "sim-callback-secret",
    },
    # DataForSEO (simulator/platforms/dataforseo.py): how many looks at a task (task_get,
    # tasks_ready) find it still queued before its result is ready.
    "dataforseo": {"deferred_looks": 1},
    "platforms": {},
}


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def validate_profile(profile: dict[str, Any]) -> dict[str, Any]:
    """The profile merged over the defaults; unknown fault names are an error."""
    merged = _merge(DEFAULT_PROFILE, profile)
    for scope in [merged, *merged["platforms"].values()]:
        unknown = set(scope.get("rates", {})) - ALL_FAULTS
        if unknown:
            raise ValueError(f"unknown fault names in profile: {sorted(unknown)}")
    return merged


def profile_for(profile: dict[str, Any], platform: str) -> dict[str, Any]:
    override = profile.get("platforms", {}).get(platform, {})
    return _merge(profile, override) if override else profile


@dataclass
class ScriptedFault:
    match: str
    fault: str
    times: int | None = 1
    platform: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    used: int = 0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScriptedFault:
        if data.get("fault") not in ALL_FAULTS:
            raise ValueError(f"unknown fault {data.get('fault')!r} (known: {sorted(ALL_FAULTS)})")
        times = data.get("times", 1)
        return cls(
            match=str(data.get("match", "")),
            fault=str(data["fault"]),
            times=None if times is None else int(times),
            platform=data.get("platform"),
            params=dict(data.get("params", {})),
        )

    def applies(self, platform: str, text: str, allowed: frozenset[str]) -> bool:
        if self.fault not in allowed or (self.platform and self.platform != platform):
            return False
        if self.times is not None and self.used >= self.times:
            return False
        return self.match in text

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Draw:
    """What one call to a simulated platform will do."""

    rng: random.Random
    call_no: int  # 1 for the first call with this text on this platform, 2 for its retry ...
    fault: str | None
    params: dict[str, Any]
    profile: dict[str, Any]
    latency_seconds: float
    platform: str = ""  # the platform asked: answers differ per platform (content.visibility)


def random_fault(
    rates: dict[str, float], allowed: frozenset[str], rng: random.Random
) -> str | None:
    """One uniform draw over the cumulative rates of the allowed faults (sorted: stable)."""
    roll = rng.random()
    cumulative = 0.0
    for name in sorted(allowed):
        cumulative += float(rates.get(name, 0.0))
        if roll < cumulative:
            return name
    return None
