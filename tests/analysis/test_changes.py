"""Change detection (analysis/changes.py): Fisher's exact test per cell, Benjamini-Hochberg
over the cells passed together, an effect threshold, empty windows skipped. Pure functions:
no database. scipy's `fisher_exact` is the reference for the vectorised p-values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import fisher_exact

from analysis.changes import (
    Cell,
    Detection,
    baseline_cell,
    benjamini_hochberg,
    detect,
    fisher_p_values,
)


def scipy_p_value(cell: Cell) -> float:
    table = [
        [cell.before_hits, cell.before_n - cell.before_hits],
        [cell.after_hits, cell.after_n - cell.after_hits],
    ]
    return float(fisher_exact(table).pvalue)


def unchanged_cells(count: int, *, hits: int = 50, n: int = 100) -> list[Cell]:
    return [Cell(f"platform-{index}/brand/visibility", hits, n, hits, n) for index in range(count)]


@st.composite
def cells(draw: st.DrawFn, max_n: int = 300) -> Cell:
    before_n = draw(st.integers(0, max_n))
    after_n = draw(st.integers(0, max_n))
    return Cell(
        key=f"cell-{draw(st.integers(0, 10_000))}",
        before_hits=draw(st.integers(0, before_n)),
        before_n=before_n,
        after_hits=draw(st.integers(0, after_n)),
        after_n=after_n,
    )


# --- what is reported ---------------------------------------------------------------------


def test_a_fifty_point_drop_at_n_200_is_detected_as_down_with_its_effect() -> None:
    drop = Cell("openai/acme/visibility", before_hits=160, before_n=200, after_hits=60, after_n=200)

    [detection] = detect([drop, *unchanged_cells(29)])

    assert detection.key == "openai/acme/visibility"
    assert detection.direction == "down"
    assert detection.effect == pytest.approx(-0.50)
    assert detection.p_value == pytest.approx(scipy_p_value(drop), rel=1e-9)
    assert detection.q_value == pytest.approx(detection.p_value * 30, rel=1e-9)  # rank 1 of 30


def test_a_rise_is_reported_as_up() -> None:
    rise = Cell(
        "kimi/globex/recommended", before_hits=20, before_n=200, after_hits=120, after_n=200
    )

    [detection] = detect([rise])

    assert detection.direction == "up"
    assert detection.effect == pytest.approx(0.50)


def test_no_change_gives_no_detection() -> None:
    same_rates = [
        Cell("a", 0, 10, 0, 200),
        Cell("b", 200, 200, 10, 10),
        Cell("c", 35, 700, 5, 100),
        *unchanged_cells(27),
    ]

    assert detect(same_rates) == []


def test_a_25_point_drop_against_a_seven_run_baseline_is_found_among_29_unchanged_cells() -> None:
    history = [(50, 100)] * 7
    drop = baseline_cell("deepseek/acme/visibility", history=history, latest=(25, 100))
    steady = [baseline_cell(f"steady-{i}", history=history, latest=(50, 100)) for i in range(29)]

    [detection] = detect([*steady, drop])

    assert (detection.key, detection.direction) == ("deepseek/acme/visibility", "down")
    assert detection.effect == pytest.approx(-0.25)


def test_detections_come_strongest_evidence_first() -> None:
    weak = Cell("weak", 100, 200, 60, 200)
    strong = Cell("strong", 180, 200, 20, 200)

    found = detect([weak, strong])

    assert [detection.key for detection in found] == ["strong", "weak"]


def test_no_cells_give_no_detection() -> None:
    assert detect([]) == []


# --- the effect threshold -----------------------------------------------------------------


def test_a_significant_change_smaller_than_min_effect_is_not_reported() -> None:
    small_but_sure = Cell("gemini/acme/visibility", 5000, 10000, 5500, 10000)  # +5 points
    assert scipy_p_value(small_but_sure) < 1e-10

    assert detect([small_but_sure]) == []
    assert [found.key for found in detect([small_but_sure], min_effect=0.05)] == [
        "gemini/acme/visibility"
    ]


def test_an_effect_of_exactly_min_effect_is_reported() -> None:
    # 0.6 - 0.5 is 0.09999999999999998 in floating point: still a 10-point change.
    ten_points = Cell("exactly-ten", 5000, 10000, 6000, 10000)

    [detection] = detect([ten_points], min_effect=0.10)

    assert detection.effect == pytest.approx(0.10)


# --- empty windows and bad input ----------------------------------------------------------


def test_cells_with_an_empty_window_are_skipped_and_left_out_of_the_correction() -> None:
    drop = Cell("drop", 160, 200, 60, 200)
    empty = [
        Cell("no-before", 0, 0, 5, 10),
        Cell("no-after", 5, 10, 0, 0),
        Cell("none", 0, 0, 0, 0),
    ]

    [detection] = detect([*empty, drop])

    assert detection.key == "drop"
    assert detection.q_value == pytest.approx(detection.p_value, rel=1e-12)  # m = 1, not 4
    assert detect(empty) == []


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        (Cell("openai/acme/visibility", 11, 10, 0, 10), "before hits must be within 0..n"),
        (Cell("openai/acme/visibility", 0, 10, 12, 10), "after hits must be within 0..n"),
        (Cell("openai/acme/visibility", -1, 10, 0, 10), "before hits must be within 0..n"),
        (Cell("openai/acme/visibility", 0, -5, 0, 10), "before n must be >= 0"),
        (Cell("openai/acme/visibility", 0, 10, 0, -1), "after n must be >= 0"),
        (Cell("openai/acme/visibility", 0, 10, 1.5, 10), "after counts must be integers"),  # type: ignore[arg-type]
    ],
)
def test_impossible_counts_raise_a_value_error_naming_the_cell(cell: Cell, message: str) -> None:
    with pytest.raises(ValueError, match=message) as raised:
        detect([*unchanged_cells(3), cell])
    assert "'openai/acme/visibility'" in str(raised.value)


@pytest.mark.parametrize(("min_effect", "fdr"), [(-0.1, 0.05), (1.5, 0.05), (0.1, 0.0), (0.1, 2)])
def test_thresholds_outside_their_range_raise_a_value_error(min_effect: float, fdr: float) -> None:
    with pytest.raises(ValueError, match="must be within"):
        detect(unchanged_cells(2), min_effect=min_effect, fdr=fdr)


# --- the Benjamini-Hochberg correction ----------------------------------------------------


def test_q_values_match_a_hand_computed_benjamini_hochberg_example() -> None:
    # Sorted: 0.005, 0.01, 0.03, 0.04 -> p * 4 / rank = 0.02, 0.02, 0.04, 0.04 (already
    # monotone). Then a step-up case: 0.02 * 3/1 = 0.06 is lowered to 0.021 * 3/2 = 0.0315.
    q_plain = benjamini_hochberg(np.array([0.01, 0.04, 0.03, 0.005]))
    q_step_up = benjamini_hochberg(np.array([0.02, 0.021, 0.5]))

    assert q_plain == pytest.approx([0.02, 0.04, 0.04, 0.02])
    assert q_step_up == pytest.approx([0.0315, 0.0315, 0.5])


def test_detections_carry_the_bh_adjustment_of_every_cells_p_value() -> None:
    testable = [
        Cell("a", 160, 200, 60, 200),
        Cell("b", 100, 200, 60, 200),
        Cell("c", 50, 100, 30, 100),
        Cell("d", 50, 100, 50, 100),
    ]
    p_values = [scipy_p_value(cell) for cell in testable]
    ranked = sorted(p_values)
    expected_q = {
        cell.key: min(ranked[j] * 4 / (j + 1) for j in range(4) if ranked[j] >= p_values[i])
        for i, cell in enumerate(testable)
    }

    found = detect(testable, min_effect=0.0, fdr=1.0)

    assert {d.key: d.q_value for d in found} == pytest.approx(expected_q, rel=1e-9)


@settings(derandomize=True, database=None, max_examples=300)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=60))
def test_q_values_are_at_least_p_at_most_one_and_ordered_as_the_p_values(
    p_list: list[float],
) -> None:
    p_values = np.array(p_list)
    q_values = benjamini_hochberg(p_values)

    assert np.all(q_values >= p_values)
    assert np.all(q_values <= 1.0)
    order = np.argsort(p_values, kind="stable")
    assert np.all(np.diff(q_values[order]) >= 0)


@settings(derandomize=True, database=None, max_examples=150, deadline=None)
@given(st.lists(cells(), min_size=1, max_size=30), st.sampled_from([0.01, 0.05, 0.2]))
def test_detect_reports_exactly_the_bh_step_up_rejections(
    cell_list: list[Cell], fdr: float
) -> None:
    testable = [cell for cell in cell_list if cell.before_n and cell.after_n]
    p_values = [scipy_p_value(cell) for cell in testable]
    m = len(testable)
    # BH by its definition: reject the k smallest, k the largest rank with p_(k) <= k fdr / m.
    # A margin keeps p-values within rounding of a threshold out of the comparison.
    ranked = sorted(p_values)
    k = max((rank for rank in range(1, m + 1) if ranked[rank - 1] <= rank * fdr / m), default=0)
    rejected = {
        cell.key for cell, p in zip(testable, p_values, strict=True) if k and p <= ranked[k - 1]
    }
    near_threshold = any(abs(p - rank * fdr / m) < 1e-9 for rank, p in enumerate(ranked, 1))

    found = detect(cell_list, min_effect=0.0, fdr=fdr)

    if not near_threshold:
        assert {detection.key for detection in found} == rejected
    for detection in found:
        assert detection.q_value <= fdr
        assert detection.p_value <= detection.q_value


# --- the exact test -----------------------------------------------------------------------


@settings(derandomize=True, database=None, max_examples=400, deadline=None)
@given(st.lists(cells(max_n=1500), min_size=1, max_size=20))
def test_p_values_agree_with_scipys_fisher_exact(cell_list: list[Cell]) -> None:
    testable = [cell for cell in cell_list if cell.before_n and cell.after_n]
    if not testable:
        return
    mine = fisher_p_values(
        before_hits=np.array([cell.before_hits for cell in testable]),
        before_n=np.array([cell.before_n for cell in testable]),
        after_hits=np.array([cell.after_hits for cell in testable]),
        after_n=np.array([cell.after_n for cell in testable]),
    )

    reference = [scipy_p_value(cell) for cell in testable]

    assert mine == pytest.approx(reference, rel=1e-8, abs=1e-300)


@pytest.mark.parametrize(
    "cell",
    [
        Cell("no hits anywhere", 0, 700, 0, 100),
        Cell("all hits everywhere", 700, 700, 100, 100),
        Cell("one of one each", 1, 1, 1, 1),
        Cell("same rate", 35, 700, 5, 100),
    ],
)
def test_a_table_without_evidence_of_change_has_p_value_one(cell: Cell) -> None:
    [p_value] = fisher_p_values(
        before_hits=np.array([cell.before_hits]),
        before_n=np.array([cell.before_n]),
        after_hits=np.array([cell.after_hits]),
        after_n=np.array([cell.after_n]),
    )
    assert p_value == pytest.approx(1.0)


@settings(derandomize=True, database=None, max_examples=200, deadline=None)
@given(st.lists(cells(), min_size=1, max_size=30))
def test_swapping_the_windows_flips_each_detection_and_keeps_its_p_value(
    cell_list: list[Cell],
) -> None:
    swapped = [Cell(c.key, c.after_hits, c.after_n, c.before_hits, c.before_n) for c in cell_list]

    forward = {d.key: d for d in detect(cell_list, min_effect=0.0, fdr=0.2)}
    backward = {d.key: d for d in detect(swapped, min_effect=0.0, fdr=0.2)}

    assert forward.keys() == backward.keys()
    for key, detection in forward.items():
        assert backward[key].direction != detection.direction
        assert backward[key].effect == pytest.approx(-detection.effect)
        assert backward[key].p_value == pytest.approx(detection.p_value, rel=1e-9)


@settings(derandomize=True, database=None, max_examples=200, deadline=None)
@given(st.lists(cells(), max_size=30), st.floats(0.0, 0.5), st.sampled_from([0.01, 0.05, 0.2]))
def test_every_detection_is_significant_large_enough_and_points_the_way_it_moved(
    cell_list: list[Cell], min_effect: float, fdr: float
) -> None:
    for detection in detect(cell_list, min_effect=min_effect, fdr=fdr):
        assert isinstance(detection, Detection)
        assert detection.q_value <= fdr
        assert abs(detection.effect) >= min_effect - 1e-9
        assert detection.direction == ("up" if detection.effect > 0 else "down")


# --- the baseline of the last K comparable runs -------------------------------------------


def test_a_baseline_cell_pools_the_history_into_the_before_window() -> None:
    history = [(10, 100), (12, 100), (8, 90), (11, 110), (9, 100), (10, 100), (10, 100)]

    cell = baseline_cell("openai/acme/visibility", history=history, latest=(3, 100))

    assert cell == Cell("openai/acme/visibility", 70, 700, 3, 100)


def test_a_baseline_cell_without_history_is_skipped_by_detect() -> None:
    cell = baseline_cell("new platform", history=[], latest=(3, 100))

    assert (cell.before_hits, cell.before_n) == (0, 0)
    assert detect([cell]) == []


def test_a_baseline_run_with_impossible_counts_raises_naming_the_cell_and_run() -> None:
    with pytest.raises(ValueError, match=r"'openai/acme/visibility': history\[1\] hits"):
        baseline_cell("openai/acme/visibility", history=[(5, 10), (11, 10)], latest=(3, 10))
