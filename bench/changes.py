"""Benchmark: change detection's error rates (analysis/changes.py), simulated, seeded.

Campaigns of 30 cells, each cell a true rate drawn from Beta(1/2, 1/2) (U-shaped: about three
cells in ten sit within 5 points of 0 or 1, where normal approximations fail) and counted with
`detect`'s defaults (min_effect 0.10, fdr 0.05):

* false alarms: nothing changes; the share of campaigns with ANY detection, for the latest run
  against the previous one (both n drawn from 10 to 200) and against a baseline of the seven
  previous runs of the same n (`baseline_cell`; latest n from 10 to 200, baseline 7 x n);
* power: the same 30 cells against their seven-run baseline, one of them dropping 25 points
  (its baseline rate drawn from 0.25 to 1) with a latest run of n = 20, 50, 100, 200 and a
  baseline of 7 x n; the share of campaigns where that cell is detected as "down". Beside it,
  the power at the hardest rate (0.75 -> 0.50, the largest variance) and the share of these
  campaigns with a false alarm among the 29 unchanged cells.

Needs no database. Not a test (tests/analysis/test_changes.py test the behaviour).

    python bench/changes.py [--campaigns N] [--seed S]
    (GEO_BENCH_CHANGES_CAMPAIGNS, default 2,000; GEO_BENCH_CHANGES_SEED, default 26)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from analysis.changes import Cell, baseline_cell, detect
from bench import common
from bench.table import BenchRow

DEFAULT_CAMPAIGNS = 2_000
DEFAULT_SEED = 26
CELLS = 30
BASELINE_RUNS = 7
DROP = 0.25
HARDEST_BEFORE_RATE = 0.75  # after 0.50: the largest binomial variance in the latest run
LATEST_N = (20, 50, 100, 200)
POWER_TARGET_N = 100
FALSE_ALARM_TARGET = 0.05
POWER_TARGET = 0.80
SECONDS_TARGET = 60.0

Campaign = Callable[[np.random.Generator], list[Cell]]


def measure() -> list[BenchRow]:
    campaigns = common.env_int("GEO_BENCH_CHANGES_CAMPAIGNS", DEFAULT_CAMPAIGNS)
    seed = common.env_int("GEO_BENCH_CHANGES_SEED", DEFAULT_SEED)
    started = time.perf_counter()
    rows = [
        _false_alarm_row("latest vs previous run", _unchanged_vs_previous, campaigns, seed),
        _false_alarm_row("latest vs 7-run baseline", _unchanged_vs_baseline, campaigns, seed + 1),
    ]
    common.log("power of a 25-point drop, latest run n vs a 7-run baseline of 7 x n:")
    common.log("latest n | baseline n |   power | power at 0.75 -> 0.50 | false alarms (29 cells)")
    for offset, latest_n in enumerate(LATEST_N):
        rows.append(_power_row(latest_n, campaigns, seed + 2 + 2 * offset))
    seconds = time.perf_counter() - started
    rows.append(
        BenchRow(
            f"changes: this benchmark ({len(rows)} scenarios x {campaigns:,} campaigns)",
            f"{seconds:.1f} s",
            "",
            "",
            f"<= {SECONDS_TARGET:.0f} s",
            seconds <= SECONDS_TARGET,
        )
    )
    return rows


def _false_alarm_row(windows: str, campaign: Campaign, campaigns: int, seed: int) -> BenchRow:
    rng = np.random.default_rng(seed)
    alarmed = sum(bool(detect(campaign(rng))) for _ in range(campaigns))
    share = alarmed / campaigns
    common.log(f"no change, {windows}: {alarmed} of {campaigns:,} campaigns with a detection")
    return BenchRow(
        f"changes: campaigns with any detection, no change, {windows} ({CELLS} cells, n 10-200)",
        _percent(share),
        "",
        "",
        f"<= {FALSE_ALARM_TARGET:.0%}",
        share <= FALSE_ALARM_TARGET,
    )


def _power_row(latest_n: int, campaigns: int, seed: int) -> BenchRow:
    drawn_rate = _power(latest_n, campaigns, np.random.default_rng(seed), before_rate=None)
    hardest = _power(
        latest_n, campaigns, np.random.default_rng(seed + 1), before_rate=HARDEST_BEFORE_RATE
    )
    power, false_alarms = drawn_rate
    common.log(
        f"{latest_n:8} | {BASELINE_RUNS * latest_n:10} | {_percent(power):>7} | "
        f"{_percent(hardest[0]):>21} | {_percent(false_alarms):>6}"
    )
    targeted = latest_n == POWER_TARGET_N
    return BenchRow(
        f"changes: power, one cell -{DROP * 100:.0f} points, latest n={latest_n} vs "
        f"7-run baseline n={BASELINE_RUNS * latest_n}",
        _percent(power),
        "",
        "",
        f">= {POWER_TARGET:.0%}" if targeted else "(shown)",
        power >= POWER_TARGET if targeted else True,
    )


def _power(
    latest_n: int, campaigns: int, rng: np.random.Generator, *, before_rate: float | None
) -> tuple[float, float]:
    """(share of campaigns finding the drop as "down", share with a false alarm elsewhere)."""
    found = alarmed = 0
    for _ in range(campaigns):
        rate = before_rate if before_rate is not None else rng.uniform(DROP, 1.0)
        history = [(int(rng.binomial(latest_n, rate)), latest_n) for _ in range(BASELINE_RUNS)]
        latest = (int(rng.binomial(latest_n, rate - DROP)), latest_n)
        dropped = baseline_cell("dropped", history=history, latest=latest)
        detections = detect([dropped, *_unchanged_vs_baseline(rng)[1:]])
        found += any(d.key == "dropped" and d.direction == "down" for d in detections)
        alarmed += any(d.key != "dropped" for d in detections)
    return found / campaigns, alarmed / campaigns


def _unchanged_vs_previous(rng: np.random.Generator) -> list[Cell]:
    rates = rng.beta(0.5, 0.5, CELLS)
    before_n = rng.integers(10, 201, CELLS)
    after_n = rng.integers(10, 201, CELLS)
    counts = zip(
        rng.binomial(before_n, rates), before_n, rng.binomial(after_n, rates), after_n, strict=True
    )
    return [Cell(f"cell-{i}", *map(int, row)) for i, row in enumerate(counts)]


def _unchanged_vs_baseline(rng: np.random.Generator) -> list[Cell]:
    rates = rng.beta(0.5, 0.5, CELLS)
    latest_n = rng.integers(10, 201, CELLS)
    runs_hits = rng.binomial(latest_n, rates, size=(BASELINE_RUNS + 1, CELLS))
    return [
        baseline_cell(
            f"cell-{i}",
            history=[(int(hits), int(latest_n[i])) for hits in runs_hits[:-1, i]],
            latest=(int(runs_hits[-1, i]), int(latest_n[i])),
        )
        for i in range(CELLS)
    ]


def _percent(share: float) -> str:
    return f"{share * 100:.1f} %"


if __name__ == "__main__":
    common.run_alone(
        measure,
        __doc__ or "",
        {
            "--campaigns": ("GEO_BENCH_CHANGES_CAMPAIGNS", DEFAULT_CAMPAIGNS),
            "--seed": ("GEO_BENCH_CHANGES_SEED", DEFAULT_SEED),
        },
    )
