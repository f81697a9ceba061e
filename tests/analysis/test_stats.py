from __future__ import annotations

from statistics import NormalDist

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.stats import Z_95, Rate, confidence_label, rate, wilson_interval


@pytest.mark.parametrize(
    ("successes", "n", "low", "high"),
    [
        # Reference values: Wilson score interval, z = 1.96 (95%).
        (0, 10, 0.0, 0.2775),
        (5, 10, 0.2366, 0.7634),
        (10, 10, 0.7225, 1.0),
        (81, 263, 0.2553, 0.3662),  # Wikipedia / Newcombe example
        (1, 1, 0.2065, 1.0),
        (158, 159, 0.9653, 0.9989),
    ],
)
def test_wilson_known_values(successes: int, n: int, low: float, high: float) -> None:
    lo, hi = wilson_interval(successes, n)
    assert lo == pytest.approx(low, abs=1e-4)
    assert hi == pytest.approx(high, abs=1e-4)


def test_wilson_extremes_are_exact() -> None:
    assert wilson_interval(0, 10)[0] == 0.0
    assert wilson_interval(10, 10)[1] == 1.0


def test_wilson_n_zero_is_uninformative() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_wilson_z_zero_collapses_to_point() -> None:
    assert wilson_interval(3, 10, z=0.0) == pytest.approx((0.3, 0.3))


@pytest.mark.parametrize(("successes", "n"), [(-1, 10), (11, 10), (0, -1), (1, 0)])
def test_wilson_rejects_impossible_counts(successes: int, n: int) -> None:
    with pytest.raises(ValueError):
        wilson_interval(successes, n)


def test_wilson_rejects_negative_z() -> None:
    with pytest.raises(ValueError):
        wilson_interval(1, 2, z=-1.0)


def test_rate() -> None:
    r = rate(158, 159)
    assert isinstance(r, Rate)
    assert r.n == 159
    assert r.successes == 158
    assert r.value == pytest.approx(158 / 159)
    assert r.value is not None
    assert r.low < r.value < r.high
    assert r.as_dict() == {
        "successes": 158,
        "n": 159,
        "value": r.value,
        "low": r.low,
        "high": r.high,
        "confidence": "medium",
    }


@pytest.mark.parametrize(
    ("n", "label"),
    [(0, "none"), (1, "very low"), (29, "very low"), (30, "low"), (99, "low"), (100, "medium"),
     (399, "medium"), (400, "high")],
)  # fmt: skip
def test_confidence_labels_follow_sample_size(n: int, label: str) -> None:
    assert confidence_label(n) == label
    assert rate(0, n).confidence == label


def test_rate_n_zero_has_no_value() -> None:
    r = rate(0, 0)
    assert r.value is None
    assert (r.low, r.high) == (0.0, 1.0)


def test_default_z_is_95_percent() -> None:
    assert abs(NormalDist().inv_cdf(0.975) - Z_95) < 1e-12


@settings(derandomize=True, database=None, max_examples=300)
@given(st.integers(min_value=1, max_value=10_000).flatmap(
    lambda n: st.tuples(st.integers(min_value=0, max_value=n), st.just(n))
))  # fmt: skip
def test_property_interval_contains_point_estimate(pair: tuple[int, int]) -> None:
    successes, n = pair
    low, high = wilson_interval(successes, n)
    assert 0.0 <= low <= successes / n <= high <= 1.0
