"""Rates with Wilson score intervals (docs/architecture.md: n and a 95% CI beside every rate).

Choices:
    * ``n == 0``: the interval is ``(0.0, 1.0)`` (nothing is known) and ``Rate.value`` is
      ``None`` (the rate is undefined; showing 0% would be a silent lie).
    * Bounds are clamped to [0, 1]; with 0 successes the lower bound is exactly 0.0 and with
      ``n`` successes the upper bound is exactly 1.0 (no floating-point residue).
    * ``successes`` outside ``0..n`` or negative ``n`` raise ``ValueError``: a denominator
      smaller than its numerator is a counting bug, never something to paper over.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["Z_95", "Rate", "confidence_label", "rate", "wilson_interval"]

Z_95 = 1.959963984540054


def _check(successes: int, n: int) -> None:
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be within 0..n, got {successes} of {n}")


def wilson_interval(successes: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion ``successes / n``."""
    _check(successes, n)
    if z < 0:
        raise ValueError(f"z must be >= 0, got {z}")
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = (z / denom) * math.sqrt(p * (1.0 - p) / n + z2 / (4.0 * n * n))
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == n else min(1.0, centre + half)
    return (low, high)


# Confidence labels by sample size: below 30 answers a 95% interval is wider than about
# +-18 points at a rate near one half, below 100 wider than about +-10 points.
CONFIDENCE_LEVELS = ((0, "none"), (1, "very low"), (30, "low"), (100, "medium"), (400, "high"))


def confidence_label(n: int) -> str:
    """How far a rate over `n` samples can be trusted, in words."""
    label = CONFIDENCE_LEVELS[0][1]
    for threshold, name in CONFIDENCE_LEVELS:
        if n >= threshold:
            label = name
    return label


@dataclass(frozen=True)
class Rate:
    successes: int
    n: int
    value: float | None
    low: float
    high: float

    @property
    def confidence(self) -> str:
        return confidence_label(self.n)

    def as_dict(self) -> dict[str, float | int | str | None]:
        return {
            "successes": self.successes,
            "n": self.n,
            "value": self.value,
            "low": self.low,
            "high": self.high,
            "confidence": self.confidence,
        }


# A report makes one Rate per entity and group (100,000 of them for 10,000 questions) from few
# distinct (successes, n): cached, it computes each once. Rate is frozen, so sharing one is
# safe; typed: True and 1 make different Rates.
@lru_cache(maxsize=65536, typed=True)
def rate(successes: int, n: int, z: float = Z_95) -> Rate:
    """``successes / n`` with its Wilson interval; ``value`` is ``None`` when ``n == 0``."""
    low, high = wilson_interval(successes, n, z)
    value = successes / n if n else None
    return Rate(successes=successes, n=n, value=value, low=low, high=high)
