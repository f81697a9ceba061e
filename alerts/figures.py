"""The counts the rules read, per run: the one seam between alerts and the metrics series.

`FiguresSource` is the interface (docs/decisions.md, "Alerts evaluate a small interface of
counts"): a run's `RunFigures` (alerts/rules.py), the key of its segment, and the comparable
runs before it. The default, `series_source`, reads the monitoring series
(monitoring/selectors.py: the rows of all questions pooled per platform and over every
platform, each run's pooled comparability key, `comparable_runs` that never crosses a
segment break). Tests set another with `use_source`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from monitoring.selectors import Counts as SeriesCounts
from monitoring.selectors import comparable_runs, run_counts
from sampling.models import Run
from sampling.selectors import run_status
from sampling.snapshots import RunConfig

from .rules import ALL, Counts, RunFigures


@dataclass(frozen=True)
class FiguresSource:
    figures: Callable[[Run], RunFigures]
    segment_key: Callable[[Run], str]
    # up to `limit` earlier runs of the run's segment, newest first
    comparable: Callable[[Run, int], Sequence[Run]]


def _counts(platform: str, brand: str, pool: dict[str, SeriesCounts]) -> list[Counts]:
    return [
        Counts(
            platform=platform,
            entity=entity,
            is_brand=entity == brand,
            planned=c["planned"],
            valid=c["valid"],
            mentioned=c["mentioned"],
            negative=c["negative"],
            rated=c["rated"],
            citations=c["citations"],
            own_citations=c["own_citations"],
        )
        for entity, c in sorted(pool.items())
    ]


def series_figures(run: Run) -> RunFigures:
    brand = RunConfig.of(run).brand.name
    per_platform = run_counts(campaign=run.campaign, runs=[run.pk], per=("platform",))
    overall = run_counts(campaign=run.campaign, runs=[run.pk], per=()).get((), [])
    counts: list[Counts] = []
    for (platform,), runs in sorted(per_platform.items()):
        for pool in runs:
            counts.extend(_counts(platform, brand, pool))
    status = run_status(run_id=run.pk)
    evidence_n = evidence_missing = 0
    for pool in overall:
        counts.extend(_counts(ALL, brand, pool))
        mine = pool.get(brand) or next(iter(pool.values()))
        evidence_n, evidence_missing = mine["planned"], mine["evidence_missing"]
    return RunFigures(
        run_id=str(run.pk),
        counts=counts,
        planned=status.planned,
        failed=status.failed_not_cancelled,
        outcome=status.outcome.value,
        evidence_n=evidence_n,
        evidence_missing=min(evidence_missing, evidence_n),
    )


def series_segment_key(run: Run) -> str:
    """The run's comparability key over all its targets (the series' pooled key); "" when
    the run has no rows yet."""
    for runs in run_counts(campaign=run.campaign, runs=[run.pk], per=()).values():
        for pool in runs:
            return next(iter(pool.values())).comparability_key
    return ""


def series_comparable(run: Run, limit: int) -> list[Run]:
    ids = comparable_runs(campaign=run.campaign, run=run, limit=limit)
    found = {str(r.pk): r for r in Run.objects.filter(pk__in=ids).select_related("campaign")}
    return [found[i] for i in ids if i in found]


series_source = FiguresSource(
    figures=series_figures, segment_key=series_segment_key, comparable=series_comparable
)
_source = series_source


def use_source(source: FiguresSource) -> None:
    """Where the rules read their counts from (tests set their own)."""
    global _source
    _source = source


def source() -> FiguresSource:
    return _source
