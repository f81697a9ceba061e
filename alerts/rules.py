"""What each rule kind checks, on counts alone: no database, no clock (the evaluation,
alerts/evaluation.py, reads the counts and acts on the findings).

The input is one `RunFigures` per run: the counts of the run per platform and entity (the
monitoring series' rows summed over region, device, mode and topic; "" is every platform),
its outcome and its evidence. The statistical kinds build `analysis.changes.Cell`s and ask
`detect` (Fisher's exact test, Benjamini-Hochberg over every cell of the rule at once, and a
minimum effect), so a rule over 30 cells fires on noise in at most `fdr` of the runs where
nothing changed. The windows are the latest run against the previous comparable run, or
against a baseline pooling the last K comparable runs (`analysis.changes.baseline_cell`);
the caller passes only runs of the latest run's segment (never across a comparability
break).

A finding's `condition_key` names the condition ("visibility:openai"): an alert is open for
it until `still_holds` says no on a later run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from analysis.changes import Cell, Detection, baseline_cell, detect
from analysis.stats import rate

ALL = ""  # the platform of the rows summed over every platform

DEFAULTS: dict[str, dict[str, float]] = {
    "visibility_drop": {"min_effect": 0.10, "fdr": 0.05},
    "competitor_ahead": {"min_effect": 0.10, "fdr": 0.05},
    "negative_sentiment": {"min_effect": 0.10, "fdr": 0.05},
    "citation_drop": {"min_effect": 0.10, "fdr": 0.05},
    "platform_gap": {"min_effect": 0.20, "fdr": 0.05},
    # the failed share of planned samples above which a run counts as failed (0: any)
    "run_failed": {"max_failed_share": 0.0},
    # the missing share's 95 % interval lies wholly above it
    "evidence_missing": {"threshold": 0.10},
}


@dataclass(frozen=True)
class Counts:
    """One run x platform x entity: what the series row holds, summed over the rest."""

    platform: str
    entity: str
    is_brand: bool
    planned: int = 0
    valid: int = 0
    mentioned: int = 0
    negative: int = 0
    rated: int = -1  # mentions with a sentiment rating (-1: not counted; `mentioned` is used)
    citations: int = 0
    own_citations: int = 0


@dataclass(frozen=True)
class RunFigures:
    run_id: str
    counts: Sequence[Counts] = ()
    planned: int = 0
    failed: int = 0
    outcome: str = ""
    evidence_n: int = 0  # samples whose evidence was to be stored
    evidence_missing: int = 0  # of those, partial or failed

    def brand(self, platform: str) -> Counts | None:
        return next((c for c in self.counts if c.is_brand and c.platform == platform), None)

    def platforms(self) -> list[str]:
        return sorted({c.platform for c in self.counts if c.platform != ALL})

    def competitors(self, platform: str) -> list[Counts]:
        return sorted(
            (c for c in self.counts if not c.is_brand and c.platform == platform),
            key=lambda c: c.entity,
        )


@dataclass(frozen=True)
class Finding:
    condition_key: str
    summary: str
    details: dict[str, Any] = field(default_factory=dict)


def params_of(kind: str, params: dict[str, Any]) -> dict[str, float]:
    return {**DEFAULTS[kind], **{k: float(v) for k, v in params.items() if k in DEFAULTS[kind]}}


def figure(hits: int, n: int, **more: Any) -> dict[str, Any]:
    """A rate as an alert stores it: hits of n, the rate and its 95 % Wilson interval."""
    r = rate(hits, n)
    return {"hits": hits, "n": n, "rate": r.value, "low": r.low, "high": r.high, **more}


# --- the statistical kinds ------------------------------------------------------------------

# A metric of a platform's counts: (hits, n) of the brand's row, or None when absent.
Metric = Callable[[Counts], tuple[int, int]]

METRICS: dict[str, tuple[str, Metric, str]] = {
    # kind: (metric name, (hits, n), the direction that fires)
    "visibility_drop": ("visibility", lambda c: (c.mentioned, c.valid), "down"),
    "negative_sentiment": (
        "negative sentiment",
        lambda c: (c.negative, c.mentioned if c.rated < 0 else c.rated),
        "up",
    ),
    "citation_drop": (
        "own-domain citation share",
        lambda c: (c.own_citations, c.citations),
        "down",
    ),
}


def _scopes(latest: RunFigures) -> list[str]:
    """Each platform, and every platform together when there are several (with one, the
    overall cell is the platform's: the same condition twice)."""
    platforms = latest.platforms()
    return platforms if len(platforms) == 1 else [ALL, *platforms]


def _label(platform: str) -> str:
    return platform or "all platforms"


def _trend_cells(
    kind: str, latest: RunFigures, history: Sequence[RunFigures]
) -> list[tuple[Cell, str, list[str]]]:
    """One cell per platform (and overall): the brand's metric, latest against the pooled
    history; with the runs of the baseline."""
    _, metric, _ = METRICS[kind]
    cells = []
    for platform in _scopes(latest):
        now = latest.brand(platform)
        if now is None:
            continue
        past = [(run.run_id, run.brand(platform)) for run in history]
        pooled = [(run_id, metric(c)) for run_id, c in past if c is not None]
        cell = baseline_cell(
            f"{kind}:{platform or 'all'}",
            history=[counts for _, counts in pooled],
            latest=metric(now),
        )
        cells.append((cell, platform, [run_id for run_id, _ in pooled]))
    return cells


def _trend(
    kind: str, params: dict[str, float], latest: RunFigures, history: Sequence[RunFigures]
) -> list[Finding]:
    name, _, fires = METRICS[kind]
    cells = _trend_cells(kind, latest, history)
    found = {
        d.key: d
        for d in detect(
            [c for c, _, _ in cells], min_effect=params["min_effect"], fdr=params["fdr"]
        )
        if d.direction == fires
    }
    out = []
    for cell, platform, runs in cells:
        d = found.get(cell.key)
        if d is None:
            continue
        before = figure(cell.before_hits, cell.before_n, runs=runs)
        after = figure(cell.after_hits, cell.after_n, run=latest.run_id)
        summary = (
            f"{name} {'fell' if fires == 'down' else 'rose'} on {_label(platform)}: "
            f"{_pct(before['rate'])} -> {_pct(after['rate'])} "
            f"(n {cell.before_n} -> {cell.after_n}, q={d.q_value:.3g})"
        )
        out.append(
            Finding(cell.key, summary, _details(name, platform, before, after, d, latest.run_id))
        )
    return out


def _details(
    metric: str,
    platform: str,
    before: dict[str, Any],
    after: dict[str, Any],
    d: Detection,
    run_id: str,
    **more: Any,
) -> dict[str, Any]:
    return {
        "metric": metric,
        "platform": platform,
        "before": before,
        "after": after,
        "effect": d.effect,
        "direction": d.direction,
        "p_value": d.p_value,
        "q_value": d.q_value,
        **more,
    }


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f} %"


def _competitor_ahead(
    params: dict[str, float], latest: RunFigures, history: Sequence[RunFigures]
) -> list[Finding]:
    """In the latest run, a competitor named in significantly more valid answers than the
    brand, per platform and overall. The two rates share their answers (a paired design);
    Fisher's test treats them as independent, which is conservative when both are named
    together often, never eager."""
    cells: list[tuple[Cell, str, Counts, Counts]] = []
    for platform in _scopes(latest):
        brand = latest.brand(platform)
        if brand is None:
            continue
        for rival in latest.competitors(platform):
            key = f"competitor_ahead:{platform or 'all'}:{rival.entity}"
            cells.append(
                (
                    Cell(key, brand.mentioned, brand.valid, rival.mentioned, rival.valid),
                    platform,
                    brand,
                    rival,
                )
            )
    found = {
        d.key: d
        for d in detect([c for c, *_ in cells], min_effect=params["min_effect"], fdr=params["fdr"])
        if d.direction == "up"
    }
    out = []
    for cell, platform, brand, rival in cells:
        d = found.get(cell.key)
        if d is None:
            continue
        before = figure(brand.mentioned, brand.valid, entity=brand.entity, run=latest.run_id)
        after = figure(rival.mentioned, rival.valid, entity=rival.entity, run=latest.run_id)
        summary = (
            f"{rival.entity} ahead of {brand.entity} on {_label(platform)}: "
            f"{_pct(after['rate'])} vs {_pct(before['rate'])} (q={d.q_value:.3g})"
        )
        out.append(
            Finding(
                cell.key,
                summary,
                _details("visibility vs competitor", platform, before, after, d, latest.run_id),
            )
        )
    return out


def _platform_gap(
    params: dict[str, float], latest: RunFigures, history: Sequence[RunFigures]
) -> list[Finding]:
    """In the latest run, a platform where the brand is named significantly less than on
    every other platform pooled."""
    platforms = latest.platforms()
    cells: list[tuple[Cell, str]] = []
    for platform in platforms:
        here = latest.brand(platform)
        others = [latest.brand(p) for p in platforms if p != platform]
        rest = [c for c in others if c is not None]
        if here is None or not rest:
            continue
        cells.append(
            (
                Cell(
                    f"platform_gap:{platform}",
                    sum(c.mentioned for c in rest),
                    sum(c.valid for c in rest),
                    here.mentioned,
                    here.valid,
                ),
                platform,
            )
        )
    found = {
        d.key: d
        for d in detect([c for c, _ in cells], min_effect=params["min_effect"], fdr=params["fdr"])
        if d.direction == "down"
    }
    out = []
    for cell, platform in cells:
        d = found.get(cell.key)
        if d is None:
            continue
        before = figure(cell.before_hits, cell.before_n, platforms="others", run=latest.run_id)
        after = figure(cell.after_hits, cell.after_n, run=latest.run_id)
        summary = (
            f"brand visibility on {platform} trails the other platforms: "
            f"{_pct(after['rate'])} vs {_pct(before['rate'])} (q={d.q_value:.3g})"
        )
        out.append(
            Finding(
                cell.key,
                summary,
                _details("platform gap", platform, before, after, d, latest.run_id),
            )
        )
    return out


# --- the threshold kinds --------------------------------------------------------------------


def _run_failed(
    params: dict[str, float], latest: RunFigures, history: Sequence[RunFigures]
) -> list[Finding]:
    if latest.planned == 0:
        return []
    share = latest.failed / latest.planned
    if latest.outcome != "all_failed" and share <= params["max_failed_share"]:
        return []
    what = "failed" if latest.outcome == "all_failed" else "partly failed"
    summary = f"run {what}: {latest.failed} of {latest.planned} samples failed"
    details = {
        "metric": "failed samples",
        "platform": ALL,
        "outcome": latest.outcome,
        "after": figure(latest.failed, latest.planned, run=latest.run_id),
    }
    return [Finding("run", summary, details)]


def _evidence_missing(
    params: dict[str, float], latest: RunFigures, history: Sequence[RunFigures]
) -> list[Finding]:
    after = figure(latest.evidence_missing, latest.evidence_n, run=latest.run_id)
    if latest.evidence_n == 0 or after["low"] <= params["threshold"]:
        return []
    summary = (
        f"evidence missing for {latest.evidence_missing} of {latest.evidence_n} samples "
        f"({_pct(after['rate'])}, above {_pct(params['threshold'])})"
    )
    details = {
        "metric": "evidence missing",
        "platform": ALL,
        "threshold": params["threshold"],
        "after": after,
    }
    return [Finding("evidence", summary, details)]


Evaluate = Callable[[dict[str, float], RunFigures, Sequence[RunFigures]], list[Finding]]

KINDS: dict[str, Evaluate] = {
    "visibility_drop": lambda p, latest, history: _trend("visibility_drop", p, latest, history),
    "negative_sentiment": lambda p, latest, history: _trend(
        "negative_sentiment", p, latest, history
    ),
    "citation_drop": lambda p, latest, history: _trend("citation_drop", p, latest, history),
    "competitor_ahead": _competitor_ahead,
    "platform_gap": _platform_gap,
    "run_failed": _run_failed,
    "evidence_missing": _evidence_missing,
}

# The kinds compared with earlier runs: without a comparable earlier run they find nothing.
NEEDS_HISTORY = frozenset(METRICS)


def evaluate(
    kind: str, params: dict[str, Any], latest: RunFigures, history: Sequence[RunFigures]
) -> list[Finding]:
    """The conditions of a rule of `kind` that hold on `latest` (history: the comparable runs
    before it, newest first, already cut to the window)."""
    if kind in NEEDS_HISTORY and not history:
        return []
    return KINDS[kind](params_of(kind, params), latest, history)


def still_holds(
    kind: str,
    params: dict[str, Any],
    *,
    condition_key: str,
    details: dict[str, Any],
    latest: RunFigures,
) -> bool:
    """Whether an open alert's condition holds on a later run. A trend alert is compared with
    the figures it fired against (its stored before window), not with the run before: a run
    as low as the one that fired does not resolve it (nor fire again), a recovered one does.
    The other kinds look at the latest run alone."""
    p = params_of(kind, params)
    if kind in METRICS:
        _, metric, fires = METRICS[kind]
        platform = condition_key.split(":", 1)[1]
        now = latest.brand(ALL if platform == "all" else platform)
        if now is None:
            return False
        before = details.get("before", {})
        hits, n = metric(now)
        cell = Cell(condition_key, int(before.get("hits", 0)), int(before.get("n", 0)), hits, n)
        return any(
            d.direction == fires for d in detect([cell], min_effect=p["min_effect"], fdr=p["fdr"])
        )
    return any(f.condition_key == condition_key for f in KINDS[kind](p, latest, ()))
