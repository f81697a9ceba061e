"""The counts the rules read, per run: the one seam between alerts and the metrics series.

`FiguresSource` is the interface (docs/decisions.md, "Alerts evaluate a small interface of
counts"): a run's `RunFigures` (alerts/rules.py) and its comparability key. The default,
`report_figures`, reads the same SQL passes as the run report (analysis/report_scan.py
`run_groups`), per platform and entity; the monitoring series (SeriesRow per run x target x
topic x entity, with its comparability_key) gives the same counts summed over target and
topic, and replaces it by `use_source` without a change to the rules or the evaluation.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

from django.db.models import Count

from analysis.evidence_summary import MISSING_STATES
from analysis.models import Mention
from analysis.report_scan import run_groups
from analysis.results import SENTIMENTS
from analysis.services import current_revision
from sampling.models import Run
from sampling.selectors import run_status
from sampling.snapshots import RunConfig

from .rules import ALL, Counts, RunFigures


@dataclass(frozen=True)
class FiguresSource:
    figures: Callable[[Run], RunFigures]
    comparability_key: Callable[[Run], str]


def report_comparability_key(run: Run) -> str:
    """What changes what a run measures: its targets, question revisions, models, and the
    analyser (name and version) of its current analysis revision. Runs with equal keys are
    comparable; a change starts a new segment."""
    config = RunConfig.of(run)
    revision = current_revision(run_id=run.pk)
    key = {
        "targets": sorted([t.platform, t.device, t.region, t.mode] for t in config.targets),
        "questions": sorted(q.revision_id for q in config.questions or ()),
        "models": sorted((k, v or "") for k, v in config.models.items()),
        "analyser": [revision.analyser, revision.analyser_version] if revision else [],
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32]


def report_figures(run: Run) -> RunFigures:
    config = RunConfig.of(run)
    revision = current_revision(run_id=run.pk)
    brand = config.brand.name
    entities = [brand, *(c.name for c in config.competitors)]
    groups = run_groups(
        run.pk, revision.pk if revision else None, brand, list(config.brand.domains), SENTIMENTS
    )
    negative = _negative(run.pk, revision.pk if revision else None)
    counts = []
    tallies = [(ALL, groups.overall), *sorted(groups.by_platform.items())]
    for platform, tally in tallies:
        planned = sum(tally.buckets.values())
        valid = tally.buckets["succeeded"]
        for entity in entities:
            is_brand = entity == brand
            counts.append(
                Counts(
                    platform=platform,
                    entity=entity,
                    is_brand=is_brand,
                    planned=planned,
                    valid=valid,
                    mentioned=tally.mentioned[entity],
                    negative=min(negative[(platform, entity)], tally.mentioned[entity]),
                    citations=tally.citations,
                    own_citations=tally.brand_citations if is_brand else 0,
                )
            )
    status = run_status(run_id=run.pk)
    states: Counter[str] = Counter()
    for _, state, _, n in groups.evidence:
        states[state] += n
    answered = status.planned - status.failed  # `failed` counts the cancelled ones
    missing_states = {str(s) for s in MISSING_STATES}
    # A sample whose collection failed has its evidence failed too: not "missing evidence".
    missing = sum(states[s] for s in missing_states) - status.failed
    return RunFigures(
        run_id=str(run.pk),
        counts=counts,
        planned=status.planned,
        failed=status.failed_not_cancelled,
        outcome=status.outcome.value,
        evidence_n=max(answered, 0),
        evidence_missing=min(max(missing, 0), max(answered, 0)),
    )


def _negative(run_id: UUID, revision_id: int | None) -> Counter[tuple[str, str]]:
    """Samples per (platform, entity) with a negative mention in the revision; ALL summed."""
    out: Counter[tuple[str, str]] = Counter()
    if revision_id is None:
        return out
    rows = (
        Mention.objects.filter(
            revision_id=revision_id, mentioned=True, sentiment="negative", sample__run_id=run_id
        )
        .values_list("platform", "entity")
        .annotate(samples=Count("sample_id", distinct=True))
    )
    for platform, entity, samples in rows:
        out[(platform, entity)] += samples
        out[(ALL, entity)] += samples
    return out


_source = FiguresSource(figures=report_figures, comparability_key=report_comparability_key)


def use_source(source: FiguresSource) -> None:
    """Where the rules read their counts from (the monitoring series, when installed)."""
    global _source
    _source = source


def source() -> FiguresSource:
    return _source
