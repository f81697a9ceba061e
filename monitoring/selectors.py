"""Reads of the metrics series (monitoring.models.SeriesRow): a metric over time in
comparable segments, and the per-cell counts change detection compares.

Every figure is a ratio of sums of the rows' counts (`METRICS`), with its Wilson 95 % interval
(analysis.stats, as in the report). A read picks one scope of rows (all questions, a topic or a
question), optionally narrows the targets (platform, region, device, mode) and pools the rows
that remain per run: a run's point is the sum of its matching rows, and its comparability key
is the digest of the keys of the rows it pooled (`pooled_key`), so a run whose targets differ
(a platform added, another region) or whose questions, model or analyser differ gets another
key. A series breaks into segments where the key changes from one run to the next; a run
with the key of an older, interrupted segment starts a new one (segments are contiguous).
Nothing here compares across a break: `comparable_runs` and `cells` stay inside the latest
run's segment.

The caller scopes: `campaign` is a campaign the person may see (tenancy.scope); every row
read here is that campaign's.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from django.db.models import QuerySet

from analysis.changes import Cell
from analysis.stats import rate
from sampling.models import Campaign, Run

from .models import COUNTS, ComparabilityKey, SeriesRow

__all__ = [
    "DIMENSIONS",
    "METRICS",
    "Counts",
    "Metric",
    "Point",
    "Segment",
    "Series",
    "UnknownMetric",
    "WindowCell",
    "cells",
    "comparable_runs",
    "describe_change",
    "latest_run",
    "metric_named",
    "pooled_key",
    "run_counts",
    "series",
]

DIMENSIONS = ("platform", "region", "device", "mode")


# --- the metrics --------------------------------------------------------------------------


@dataclass(frozen=True)
class Counts:
    """One run's counts in one pool (summed rows of one entity), with the pool's key."""

    run_id: str
    at: datetime
    entity: str
    comparability_key: str
    values: Mapping[str, int]  # COUNTS -> sum
    # the sum of `mentioned` over every entity of the same run and pool (share of voice)
    all_mentioned: int = 0
    # the keys of the rows pooled (one: the row's own), whose parts say what they measure
    member_keys: tuple[str, ...] = ()
    is_brand: bool = False

    def __getitem__(self, name: str) -> int:
        if name == "all_mentioned":
            return self.all_mentioned
        return int(self.values.get(name, 0))


@dataclass(frozen=True)
class Metric:
    """A figure as hits over n, both sums of counts. `proportion`: a share of n with a
    Wilson interval; otherwise a mean (average position) without one."""

    name: str
    label: str
    hits: str
    n: str
    proportion: bool = True

    def of(self, counts: Counts) -> tuple[int, int]:
        return counts[self.hits], counts[self.n]


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        # succeeded answers that mention the entity, of the succeeded answers
        Metric("visibility", "Visibility (of valid answers)", "mentioned", "valid"),
        # the report's mention rate: of the planned samples (failed ones count against it)
        Metric("mention_rate", "Mention rate (of planned samples)", "mentioned", "planned"),
        # the entity's mentions that recommend it (the report's recommendation rate)
        Metric("recommendation", "Recommended (of mentions)", "recommended", "rated"),
        # valid answers that name the entity first
        Metric("first_position", "Named first (of valid answers)", "first_position", "valid"),
        # the mean rank among answers that rank it (1 = first); no interval
        Metric("average_position", "Average position", "position_sum", "ranked", False),
        Metric("positive_share", "Positive (of mentions)", "positive", "rated"),
        Metric("negative_share", "Negative (of mentions)", "negative", "rated"),
        # citations to the entity's own domains, of all citations (the report's citation share)
        Metric("own_citation_share", "Own-domain citations", "own_citations", "citations"),
        # the entity's mentions of all entities' mentions (brand and competitors)
        Metric("share_of_voice", "Share of voice", "mentioned", "all_mentioned"),
        Metric("failure_rate", "Failed (of planned samples)", "failed", "planned"),
        Metric(
            "evidence_missing_rate", "Evidence missing (of planned)", "evidence_missing", "planned"
        ),
    )
}


# --- pooling rows per run ----------------------------------------------------------------


def pooled_key(keys: Iterable[str]) -> str:
    """The key of a pool of rows: its one key, or the digest of its distinct keys."""
    distinct = sorted(set(keys))
    if len(distinct) == 1:
        return distinct[0]
    return hashlib.sha256("\n".join(distinct).encode()).hexdigest()


def _scope(
    rows: QuerySet[SeriesRow], topic: str | None, question: int | None
) -> QuerySet[SeriesRow]:
    if question is not None:
        return rows.filter(question_id=question)
    return rows.filter(question__isnull=True, topic=topic or "")


def _rows(
    *,
    campaign: Campaign,
    topic: str | None,
    question: int | None,
    targets: Mapping[str, str | None],
    since: datetime | None = None,
    until: datetime | None = None,
    runs: Sequence[UUID | str] | None = None,
) -> QuerySet[SeriesRow]:
    rows = _scope(SeriesRow.objects.filter(campaign_id=campaign.pk), topic, question)
    narrowed = {k: v for k, v in targets.items() if v is not None}
    if narrowed:
        rows = rows.filter(**narrowed)
    if since is not None:
        rows = rows.filter(at__gte=since)
    if until is not None:
        rows = rows.filter(at__lte=until)
    if runs is not None:
        rows = rows.filter(run_id__in=list(runs))
    return rows


def _pool(
    rows: QuerySet[SeriesRow], per: Sequence[str] = ()
) -> dict[tuple[str, ...], list[dict[str, Counts]]]:
    """Rows summed per group (`per`: target dimensions the groups split by) and run: for
    each group, its runs oldest first, each as entity -> Counts."""
    fields = ("run_id", "at", "entity", "is_brand", "comparability_key", *DIMENSIONS, *COUNTS)
    sums: dict[tuple[tuple[str, ...], str], dict[str, dict[str, int]]] = defaultdict(dict)
    keys: dict[tuple[tuple[str, ...], str], set[str]] = defaultdict(set)
    at: dict[str, datetime] = {}
    brands: set[str] = set()
    for row in rows.order_by().values(*fields).iterator(chunk_size=5000):
        group = tuple(str(row[d]) for d in per)
        run = str(row["run_id"])
        at[run] = row["at"]
        if row["is_brand"]:
            brands.add(row["entity"])
        keys[(group, run)].add(row["comparability_key"])
        entity = sums[(group, run)].setdefault(row["entity"], dict.fromkeys(COUNTS, 0))
        for name in COUNTS:
            entity[name] += int(row[name])
    out: dict[tuple[str, ...], list[dict[str, Counts]]] = defaultdict(list)
    for (group, run), entities in sorted(
        sums.items(), key=lambda kv: (kv[0][0], at[kv[0][1]], kv[0][1])
    ):
        members = tuple(sorted(keys[(group, run)]))
        key = pooled_key(members)
        everyone = sum(values["mentioned"] for values in entities.values())
        out[group].append(
            {
                name: Counts(
                    run_id=run,
                    at=at[run],
                    entity=name,
                    comparability_key=key,
                    values=values,
                    all_mentioned=everyone,
                    member_keys=members,
                    is_brand=name in brands,
                )
                for name, values in entities.items()
            }
        )
    return dict(out)


def _segment_of(runs: Sequence[Mapping[str, Counts]]) -> list[int]:
    """Each run's segment index: it grows by one wherever the key differs from the run before."""
    indexes: list[int] = []
    last: str | None = None
    for run in runs:
        key = next(iter(run.values())).comparability_key
        indexes.append(0 if last is None else indexes[-1] + (key != last))
        last = key
    return indexes


# --- a metric over time -------------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    """One run's figure. `rate`: hits / n (None when n is 0); `low`/`high`: its Wilson 95 %
    interval (None for a mean); `segment`: the index of its segment in `Series.segments`."""

    run_id: str
    at: datetime
    hits: int
    n: int
    rate: float | None
    low: float | None
    high: float | None
    segment: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "at": self.at.isoformat(),
            "hits": self.hits,
            "n": self.n,
            "rate": self.rate,
            "low": self.low,
            "high": self.high,
            "segment": self.segment,
        }


@dataclass(frozen=True)
class Segment:
    """A stretch of consecutive runs that measured the same thing (one comparability key).
    `changes`: what differs from the segment before (empty for the first), in words."""

    index: int
    comparability_key: str
    start: datetime
    end: datetime
    runs: int
    changes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "comparability_key": self.comparability_key,
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "runs": self.runs,
            "changes": list(self.changes),
        }


@dataclass(frozen=True)
class Series:
    metric: str
    entity: str
    filters: Mapping[str, Any]
    points: list[Point] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "entity": self.entity,
            "filters": dict(self.filters),
            "points": [p.as_dict() for p in self.points],
            "segments": [s.as_dict() for s in self.segments],
        }


class UnknownMetric(ValueError):
    pass


def metric_named(name: str) -> Metric:
    try:
        return METRICS[name]
    except KeyError:
        raise UnknownMetric(f"unknown metric {name!r}; one of {', '.join(METRICS)}") from None


def brand_of(campaign: Campaign) -> str:
    return campaign.brand.name


def series(
    *,
    campaign: Campaign,
    metric: str,
    entity: str | None = None,
    platform: str | None = None,
    region: str | None = None,
    device: str | None = None,
    mode: str | None = None,
    topic: str | None = None,
    question: int | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> Series:
    """`metric` (a name of METRICS) of `entity` (default: the campaign's brand) per run, oldest
    first, between `since` and `until` (inclusive, on the run's finish time), in segments.

    Scope: `question` (a Question id) or else `topic` or else all of the run's questions.
    A target dimension left None pools every value of it (each run's point sums its rows);
    segments then break wherever the set of pooled targets changes, as anything else the key
    covers. Segments are found over the whole selected range only: a range that starts inside
    a segment starts with it. Raises UnknownMetric for an unknown metric name."""
    chosen = metric_named(metric)
    name = entity or brand_of(campaign)  # by default the brand's rows, whatever it was called
    targets = {"platform": platform, "region": region, "device": device, "mode": mode}
    filters = {**targets, "topic": topic, "question": question, "since": since, "until": until}
    rows = _rows(
        campaign=campaign,
        topic=topic,
        question=question,
        targets=targets,
        since=since,
        until=until,
    )
    if chosen.n != "all_mentioned":  # one entity's rows give its figures (and the run's key)
        rows = rows.filter(entity=name) if entity else rows.filter(is_brand=True)
    runs = _pool(rows).get((), [])
    indexes = _segment_of(runs)
    points: list[Point] = []
    for run, index in zip(runs, indexes, strict=True):
        first = next(iter(run.values()))
        found = run.get(name) if entity else next((c for c in run.values() if c.is_brand), None)
        counts = found or Counts(
            first.run_id, first.at, name, first.comparability_key, {}, first.all_mentioned
        )
        hits, n = chosen.of(counts)
        points.append(_point(chosen, counts, hits, n, index))
    return Series(
        metric=chosen.name,
        entity=name,
        filters={k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in filters.items()},
        points=points,
        segments=_segments(points, runs),
    )


def _point(metric: Metric, counts: Counts, hits: int, n: int, segment: int) -> Point:
    if metric.proportion:
        figure = rate(hits, n)
        return Point(
            counts.run_id, counts.at, hits, n, figure.value, figure.low, figure.high, segment
        )
    return Point(counts.run_id, counts.at, hits, n, hits / n if n else None, None, None, segment)


def _segments(points: Sequence[Point], runs: Sequence[Mapping[str, Counts]]) -> list[Segment]:
    out: list[Segment] = []
    previous: tuple[str, ...] = ()
    for point, run in zip(points, runs, strict=True):
        first = next(iter(run.values()))
        key = first.comparability_key
        if out and out[-1].index == point.segment:
            last = out[-1]
            out[-1] = Segment(
                last.index,
                last.comparability_key,
                last.start,
                point.at,
                last.runs + 1,
                last.changes,
            )
            continue
        changes = tuple(describe_change(previous, first.member_keys)) if previous else ()
        out.append(Segment(point.segment, key, point.at, point.at, 1, changes))
        previous = first.member_keys
    return out


# --- what changed at a break -----------------------------------------------------------------


def describe_change(before: Iterable[str], after: Iterable[str]) -> list[str]:
    """What differs between what two pools of rows measure (each: the keys of its rows), in
    words: targets added or removed, and per target the model, the analyser and the questions
    (added, removed, edited)."""
    old_keys, new_keys = set(before), set(after)
    if old_keys == new_keys:
        return []
    parts = dict(
        ComparabilityKey.objects.filter(digest__in=old_keys | new_keys).values_list(
            "digest", "parts"
        )
    )
    old = {_target(parts[k]): parts[k] for k in sorted(old_keys) if k in parts}
    new = {_target(parts[k]): parts[k] for k in sorted(new_keys) if k in parts}
    if not old or not new:
        return ["what is measured changed"]
    changes = [f"target added: {t}" for t in sorted(set(new) - set(old))]
    changes += [f"target removed: {t}" for t in sorted(set(old) - set(new))]
    for target in sorted(set(old) & set(new)):
        a, b = old[target], new[target]
        for part in ("model", "analyser", "analyser_version"):
            if a.get(part) != b.get(part):
                changes.append(f"{target}: {part} {a.get(part)!r} -> {b.get(part)!r}")
        qa = {int(q): int(r) for q, r in a.get("questions", [])}
        qb = {int(q): int(r) for q, r in b.get("questions", [])}
        added, removed = set(qb) - set(qa), set(qa) - set(qb)
        edited = {q for q in set(qa) & set(qb) if qa[q] != qb[q]}
        if added:
            changes.append(f"{target}: {len(added)} question(s) added")
        if removed:
            changes.append(f"{target}: {len(removed)} question(s) removed")
        if edited:
            changes.append(f"{target}: {len(edited)} question(s) edited (new revision)")
    return changes or ["what is measured changed"]


def _target(parts: Mapping[str, Any]) -> str:
    return "/".join(str(parts.get(d, "")) for d in DIMENSIONS)


# --- the latest run against its comparable predecessors -----------------------------------


def run_counts(
    *,
    campaign: Campaign,
    runs: Sequence[UUID | str],
    per: Sequence[str] = ("platform",),
    topic: str | None = None,
    question: int | None = None,
    platform: str | None = None,
    region: str | None = None,
    device: str | None = None,
    mode: str | None = None,
) -> dict[tuple[str, ...], list[dict[str, Counts]]]:
    """The runs' pooled counts per group of `per` (target dimensions; () pools every
    target): group -> its runs (of `runs` that have rows), oldest first -> entity -> Counts."""
    targets = {"platform": platform, "region": region, "device": device, "mode": mode}
    rows = _rows(campaign=campaign, topic=topic, question=question, targets=targets, runs=runs)
    return _pool(rows, per)


def comparable_runs(
    *,
    campaign: Campaign,
    run: Run | UUID | str,
    limit: int = 7,
    platform: str | None = None,
    region: str | None = None,
    device: str | None = None,
    mode: str | None = None,
    topic: str | None = None,
    question: int | None = None,
) -> list[str]:
    """The ids of up to `limit` runs before `run` in its segment (same pooled key, no break
    between), newest first, for the scope and targets given (None pools, as in `series`).
    Empty when the run has no rows there or starts a segment."""
    run_id = str(run.pk if isinstance(run, Run) else run)
    targets = {"platform": platform, "region": region, "device": device, "mode": mode}
    rows = _rows(campaign=campaign, topic=topic, question=question, targets=targets)
    at = SeriesRow.objects.filter(run_id=run_id).values_list("at", flat=True).first()
    if at is None:
        return []
    # every entity of a run has the same keys: the brand's rows will do
    runs = _pool(rows.filter(at__lte=at, is_brand=True)).get((), [])
    ids = [next(iter(r.values())).run_id for r in runs]
    if run_id not in ids:
        return []
    position = ids.index(run_id)
    indexes = _segment_of(runs)
    earlier = [ids[i] for i in range(position - 1, -1, -1) if indexes[i] == indexes[position]]
    return earlier[:limit]


@dataclass(frozen=True)
class WindowCell:
    """One group (`group`: its values of `per`) x entity x metric, the latest run against
    its baseline (`before_runs`: the comparable runs pooled, newest first). `cell` is what
    analysis.changes.detect takes; its key is "metric|entity|group values"."""

    cell: Cell
    metric: str
    entity: str
    group: Mapping[str, str]
    run_id: str
    before_runs: tuple[str, ...]
    comparability_key: str


def cells(
    *,
    campaign: Campaign,
    run: Run | UUID | str,
    metrics: Sequence[str] = ("visibility",),
    entities: Sequence[str] | None = None,
    per: Sequence[str] = ("platform",),
    baseline: int = 1,
    topic: str | None = None,
    question: int | None = None,
) -> list[WindowCell]:
    """For each group of `per` (target dimensions; () the run's targets pooled), entity
    (default: every entity of the run) and metric: `run`'s hits and n (after) against the
    pooled hits and n of up to `baseline` comparable runs before it in the group's segment
    (before: its previous comparable run when `baseline` is 1). A group whose key changed at
    `run` (its segment starts there) has an empty before window: `detect` skips it. Means
    (average position) are not proportions and are refused (ValueError)."""
    chosen = [metric_named(m) for m in metrics]
    for metric in chosen:
        if not metric.proportion:
            raise ValueError(f"{metric.name} is a mean, not a proportion: nothing to test")
    run_id = str(run.pk if isinstance(run, Run) else run)
    at = SeriesRow.objects.filter(run_id=run_id).values_list("at", flat=True).first()
    if at is None:
        return []
    rows = _rows(campaign=campaign, topic=topic, question=question, targets={})
    if entities is not None and all(m.n != "all_mentioned" for m in chosen):
        rows = rows.filter(entity__in=list(entities))
    groups = _pool(rows.filter(at__lte=at), per)
    out: list[WindowCell] = []
    for group, runs in sorted(groups.items()):
        ids = [next(iter(r.values())).run_id for r in runs]
        if not ids or ids[-1] != run_id:
            continue  # the run has no rows in this group
        indexes = _segment_of(runs)
        before = [runs[i] for i in range(len(runs) - 2, -1, -1) if indexes[i] == indexes[-1]][
            :baseline
        ]
        latest = runs[-1]
        names = entities if entities is not None else list(latest)
        labels = dict(zip(per, group, strict=True))
        for metric in chosen:
            for name in names:
                after = latest.get(name)
                hits, n = metric.of(after) if after else (0, 0)
                before_hits = before_n = 0
                for past in before:
                    counts = past.get(name)
                    if counts is not None:
                        h, m = metric.of(counts)
                        before_hits, before_n = before_hits + h, before_n + m
                key = "|".join((metric.name, name, *group))
                out.append(
                    WindowCell(
                        cell=Cell(key, before_hits, before_n, hits, n),
                        metric=metric.name,
                        entity=name,
                        group=labels,
                        run_id=run_id,
                        before_runs=tuple(next(iter(p.values())).run_id for p in before),
                        comparability_key=next(iter(latest.values())).comparability_key,
                    )
                )
    return out


def latest_run(*, campaign: Campaign) -> str | None:
    """The campaign's newest run with series rows (by finish time), or None."""
    row = SeriesRow.objects.filter(campaign_id=campaign.pk).order_by("-at", "-run_id").first()
    return str(row.run_id) if row else None
