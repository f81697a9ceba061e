"""Change detection with a known error rate: which cells moved between two windows.

A cell is one platform x entity x metric (or any key) counted in a window before and a window
after: hits of n. `detect` tests every cell, corrects for testing them together, and reports
only the cells whose change is both significant and large enough to matter.

Choices (docs/decisions.md, "Change detection: Fisher's exact test, Benjamini-Hochberg"):
    * The test is Fisher's exact test, two-sided (a table is as extreme as the observed one
      when its conditional probability is no larger, the definition of scipy and R). Its
      p-value is valid at every true rate and every n: with n from 10 to 200 and rates near 0
      or 1, normal approximations are not. It is computed here for all cells at once (one
      vectorised pass over the hypergeometric supports) and tested against
      `scipy.stats.fisher_exact`.
    * The correction is Benjamini-Hochberg over every cell passed in that has both windows
      non-empty. Under "nothing changed" every detection is false, so its false-discovery
      rate is the chance of any detection at all: BH caps the share of campaigns with a
      false alarm at `fdr`.
    * A cell is reported when its q-value is <= `fdr` and |effect| >= `min_effect`; effect is
      the after rate minus the before rate.
    * Cells with an empty window are skipped (nothing to compare), not counted in the
      correction, never an error. Counts outside 0 <= hits <= n raise ValueError naming the
      cell: a count like that is a bug upstream, never something to paper over.
    * Windows: the latest run against the previous comparable one is `Cell` itself; against
      a baseline of the last K comparable runs it is `baseline_cell`, which pools their
      counts. The caller picks comparable runs (one segment of the series); nothing here
      knows what makes runs comparable.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.special import gammaln

__all__ = ["Cell", "Detection", "baseline_cell", "detect", "fisher_p_values"]

# Two tables whose conditional probabilities differ by less than this (relative) are ties
# (R's fisher.test uses the same 1e-7): the log-probabilities carry rounding of ~1e-13 of
# lgamma's size, so an exact comparison would split true ties at random.
_TIE_TOLERANCE = 1e-7
# An effect of exactly `min_effect` counts: 60/100 after 50/100 is 0.09999999999999998 in
# floating point, and no count can sit this close to the threshold without reaching it.
_EFFECT_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Cell:
    """One platform x entity x metric (or any key) in two windows."""

    key: str
    before_hits: int
    before_n: int
    after_hits: int
    after_n: int


@dataclass(frozen=True)
class Detection:
    key: str
    direction: str  # "up" or "down"
    effect: float  # after rate - before rate
    p_value: float
    q_value: float  # after the false-discovery correction over all cells passed in


def detect(
    cells: Sequence[Cell], *, min_effect: float = 0.10, fdr: float = 0.05
) -> list[Detection]:
    """The cells that changed: BH-significant at `fdr` over all testable cells and moved by
    at least `min_effect`; strongest evidence first (q, then p, then key)."""
    if not 0.0 <= min_effect <= 1.0:
        raise ValueError(f"min_effect must be within 0..1, got {min_effect}")
    if not 0.0 < fdr <= 1.0:
        raise ValueError(f"fdr must be within (0, 1], got {fdr}")
    for cell in cells:
        _check_cell(cell)
    testable = [cell for cell in cells if cell.before_n > 0 and cell.after_n > 0]
    if not testable:
        return []
    p_values = fisher_p_values(
        before_hits=np.array([cell.before_hits for cell in testable]),
        before_n=np.array([cell.before_n for cell in testable]),
        after_hits=np.array([cell.after_hits for cell in testable]),
        after_n=np.array([cell.after_n for cell in testable]),
    )
    q_values = benjamini_hochberg(p_values)
    detections = []
    for cell, p_value, q_value in zip(testable, p_values, q_values, strict=True):
        effect = cell.after_hits / cell.after_n - cell.before_hits / cell.before_n
        if q_value <= fdr and abs(effect) >= min_effect - _EFFECT_TOLERANCE:
            direction = "up" if effect > 0 else "down"
            detections.append(
                Detection(cell.key, direction, effect, float(p_value), float(q_value))
            )
    return sorted(detections, key=lambda found: (found.q_value, found.p_value, found.key))


def baseline_cell(key: str, *, history: Sequence[tuple[int, int]], latest: tuple[int, int]) -> Cell:
    """The latest window against a baseline pooling the (hits, n) of the last K comparable
    windows in `history`. Pooling treats the baseline runs as draws of one rate: a baseline
    that itself drifts run to run makes the test too eager (docs/decisions.md). An empty
    history gives an empty before window, which `detect` skips."""
    before_hits = sum(hits for hits, _ in history)
    before_n = sum(n for _, n in history)
    cell = Cell(key, before_hits, before_n, latest[0], latest[1])
    for index, (hits, n) in enumerate(history):
        _check_counts(key, f"history[{index}]", hits, n)
    _check_cell(cell)
    return cell


def fisher_p_values(
    *,
    before_hits: npt.NDArray[np.int64],
    before_n: npt.NDArray[np.int64],
    after_hits: npt.NDArray[np.int64],
    after_n: npt.NDArray[np.int64],
) -> npt.NDArray[np.float64]:
    """Two-sided Fisher exact p-values of many 2x2 tables at once (counts already checked,
    every n > 0). Given both margins, the after hits follow a hypergeometric law over a
    support of at most min(n) + 1 values; the p-value is the probability of the support
    points no more likely than the observed one. All supports are laid end to end in one
    array so that the cost is a handful of numpy passes, not a Python loop per table."""
    total = before_n + after_n
    total_hits = before_hits + after_hits
    low = np.maximum(0, after_n - (total - total_hits))
    high = np.minimum(total_hits, after_n)
    sizes = high - low + 1
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    table = np.repeat(np.arange(len(sizes)), sizes)
    support = low[table] + np.arange(int(sizes.sum())) - starts[table]
    log_weight = _log_hypergeometric_weight(
        support, total_hits[table], after_n[table], total[table]
    )
    observed = _log_hypergeometric_weight(after_hits, total_hits, after_n, total)
    # Scaled by each table's most likely point, so the sums neither overflow nor underflow.
    weight = np.exp(log_weight - np.maximum.reduceat(log_weight, starts)[table])
    as_extreme = log_weight <= observed[table] + math.log1p(_TIE_TOLERANCE)
    p_values = np.add.reduceat(weight * as_extreme, starts) / np.add.reduceat(weight, starts)
    return np.minimum(p_values, 1.0)


def benjamini_hochberg(p_values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """BH-adjusted p-values (q-values): q of the i-th smallest p is min over j >= i of
    p_(j) * m / j, capped at 1; a cell is significant at level a exactly when q <= a."""
    count = len(p_values)
    order = np.argsort(p_values, kind="stable")
    # m / rank first: a factor >= 1 keeps every q >= its p in floating point, too.
    scaled = p_values[order] * (count / np.arange(1, count + 1))
    monotone = np.minimum.accumulate(scaled[::-1])[::-1]
    q_values = np.empty(count)
    q_values[order] = np.minimum(monotone, 1.0)
    return q_values


def _log_hypergeometric_weight(
    hits: npt.NDArray[np.int64],
    total_hits: npt.NDArray[np.int64],
    draws: npt.NDArray[np.int64],
    total: npt.NDArray[np.int64],
) -> npt.NDArray[np.float64]:
    """log of C(total_hits, hits) * C(total - total_hits, draws - hits), without the terms
    that depend only on the margins (they cancel in the p-value's ratio)."""
    misses = draws - hits
    return -(
        gammaln(hits + 1.0)
        + gammaln(total_hits - hits + 1.0)
        + gammaln(misses + 1.0)
        + gammaln(total - total_hits - misses + 1.0)
    )


def _check_cell(cell: Cell) -> None:
    _check_counts(cell.key, "before", cell.before_hits, cell.before_n)
    _check_counts(cell.key, "after", cell.after_hits, cell.after_n)


def _check_counts(key: str, window: str, hits: int, n: int) -> None:
    try:
        hits, n = operator.index(hits), operator.index(n)
    except TypeError:
        message = f"cell {key!r}: {window} counts must be integers, got {hits!r} of {n!r}"
        raise ValueError(message) from None
    if n < 0:
        raise ValueError(f"cell {key!r}: {window} n must be >= 0, got {n}")
    if not 0 <= hits <= n:
        raise ValueError(f"cell {key!r}: {window} hits must be within 0..n, got {hits} of {n}")
