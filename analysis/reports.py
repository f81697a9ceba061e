"""Run reports (docs/architecture.md): metrics per run, platform, question and over time, refused
unless the counts are conserved and agree when computed twice by different routes.

Denominators
    Every sample of the plan is in exactly one bucket: succeeded, failed, invalid, review,
    pending. Mention rates are over *planned* samples (failed, invalid, in-review and pending
    samples stay in the denominator and are shown beside the rate, never dropped). Only
    succeeded samples (completed, valid, analysis accepted) can count as a mention.

Checks (before any report is returned; a failure raises `ReportIntegrityError` naming each
difference)
    * Conservation: succeeded + failed + invalid + review + pending = planned. `review` is a
      fifth bucket of our status aggregation (terminal for the run, not yet succeeded), so
      it is part of the equation. It is checked for the status aggregation
      (`sampling.selectors.run_status`, which reads the trigger-maintained counters), for the
      record scan overall and per question, and the scan must find exactly
      `run.planned_samples` sample rows.
    * Double count: the record scan is one grouped SQL pass over the run's samples that
      classifies each row (analysis.report_scan, with the buckets of sampling/buckets.py); its
      bucket counts per platform must equal
      the counters (sampling/counters.py, named column by column with the difference) and the
      status aggregation; the brand-mentioned count through the analysed captures must equal
      a count over the revision's mention rows of the succeeded samples (the sentiment's
      count: a tally of the same mention pass that does not go through the analysed
      captures).
    * Second count (analysis.second_count): mentions re-derived from the stored answer text
      with the revision's analyser must equal the stored rows, field by field, for every
      succeeded sample (a deterministic 10,000 of them in larger runs). The double count
      reads the same rows twice; only this one would see an analyser bug or a bad row.

A report reads one analysis revision (`revision=N`, default the newest finished one, see
`analysis.services.current_revision`). A mention counts only in a counted context (not
absence or other_sense: analysis.results).

Metrics (computed in SQL by analysis.report_scan, grouped per platform and question revision
and rolled up; memory grows with platforms x questions, never with samples)
    * mention rate: succeeded samples whose analysed capture mentions the entity / planned;
    * share of voice: the entity's (sample, entity) mention pairs / all pairs of the brand
      and its competitors, over succeeded samples;
    * average first-mention rank of the brand (1 = mentioned first), n = samples where the
      brand was mentioned;
    * citation share: citations whose host is one of the brand's domains (or a subdomain) /
      all citations of succeeded samples' analysed captures;
    * top cited registrable domains (offline public-suffix list);
    * sources found but not cited (`Citation.role`): their own figure, never in the citation
      figures above or below;
    * citation share per domain category (evidence/categories.py: the campaign's brand and
      competitor domains are own and competitor, then the tenant's overrides, then the shipped
      classification, whose version the report names) and per entity (citations of the
      entity's domains / all citations);
    * what the engines searched: each query the engines ran, per question and platform, with
      how many analysed answers ran it;
    * source opportunities: registrable domains cited in answers that name a competitor and
      in no answer that names the brand, by the number of those answers (n);
    * sentiment distribution and recommendation rate per entity, and competitor
      head-to-head per question (analysis.mention_metrics), counted in the mention pass of
      analysis.report_scan (every mention row of the succeeded samples, not only the analysed
      capture's; head-to-head beside the same sample's brand row);
    * evidence completeness per platform (analysis.evidence_summary), counted in its sample
      pass.
    Every rate carries n, a Wilson 95% interval and a confidence label (`analysis.stats`).

The analysed capture of a sample is its latest completed capture, as in
`analysis.services.analyse_sample`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from django.db import transaction

from evidence.categories import COMPETITOR, OWN, Classifier, classifier
from evidence.models import DomainCategory
from sampling import buckets, counters
from sampling.models import QuestionRevision, Run
from sampling.selectors import run_status
from sampling.snapshots import RunConfig

from .evidence_summary import EvidenceSummary, evidence_summaries
from .mention_metrics import HeadToHead, SentimentStat, head_to_head, sentiment_distribution
from .models import AnalysisRevision
from .report_scan import (
    TARGET_PARTS,
    Groups,
    Tally,
    run_groups,
    scan_settings,
    unclassified_ids,
)
from .results import SENTIMENTS
from .second_count import SecondCount, second_count
from .services import current_revision
from .stats import Rate, rate

__all__ = [
    "BUCKETS",
    "BucketCounts",
    "Metrics",
    "RankStat",
    "ReportIntegrityError",
    "RunReport",
    "TrendPoint",
    "build_run_report",
]

# The report's buckets: the status buckets with cancelled samples apart from failed ones
# (sampling/buckets.py REPORTED); the status aggregation counts them within failed.
BUCKETS = tuple(bucket.name for bucket in buckets.REPORTED)
STATUS_BUCKETS = tuple(bucket.name for bucket in buckets.OUTCOMES)
TREND_RUNS = 12
TOP_DOMAINS = 10
TOP_SEARCHES = 10  # per question and platform
TOP_OPPORTUNITIES = 20


class ReportIntegrityError(Exception):
    """The report's numbers do not add up; `differences` names each one."""

    def __init__(self, run_id: object, differences: list[str]) -> None:
        self.run_id = run_id
        self.differences = differences
        super().__init__(f"report for run {run_id} refused: " + "; ".join(differences))


# --- metrics ----------------------------------------------------------------------------


@dataclass(frozen=True)
class BucketCounts:
    """A report row's planned samples and how many of them are in each bucket (BUCKETS)."""

    planned: int
    succeeded: int
    failed: int  # not counting the cancelled ones
    invalid: int
    review: int
    pending: int
    cancelled: int = 0  # ended by a cancel before the upstream was asked

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class RankStat:
    mean: float | None
    n: int

    def as_dict(self) -> dict[str, float | int | None]:
        return {"mean": self.mean, "n": self.n}


@dataclass(frozen=True)
class Metrics:
    key: str
    label: str
    counts: BucketCounts
    mention_rate: Rate  # brand, over asked (planned less cancelled)
    entity_mention_rates: dict[str, Rate]  # brand and competitors, over asked
    share_of_voice: dict[str, Rate]  # brand and competitors, over all mention pairs
    first_rank: RankStat  # brand
    citation_share: Rate  # brand's domains, over all citations
    citations_unparseable: int
    top_domains: list[tuple[str, int]]
    found_not_cited: int = 0  # sources the engines found that the answers do not cite
    category_share: dict[str, Rate] = field(default_factory=dict)  # over all citations
    entity_citation_share: dict[str, Rate] = field(default_factory=dict)  # over all citations

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "label": self.label,
            "counts": self.counts.as_dict(),
            "mention_rate": self.mention_rate.as_dict(),
            "entity_mention_rates": {k: v.as_dict() for k, v in self.entity_mention_rates.items()},
            "share_of_voice": {k: v.as_dict() for k, v in self.share_of_voice.items()},
            "first_mention_rank": self.first_rank.as_dict(),
            "citation_share": self.citation_share.as_dict(),
            "citations_unparseable": self.citations_unparseable,
            "top_cited_domains": [{"domain": d, "citations": n} for d, n in self.top_domains],
            "found_not_cited": self.found_not_cited,
            "citation_share_by_category": {k: v.as_dict() for k, v in self.category_share.items()},
            "citation_share_by_entity": {
                k: v.as_dict() for k, v in self.entity_citation_share.items()
            },
        }


@dataclass(frozen=True)
class SearchStat:
    """A query the engines ran for a question on a platform, and in how many analysed
    answers (a query run twice for one answer counts twice)."""

    question: str
    platform: str
    query: str
    n: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SourceOpportunity:
    """A domain cited in `n` answers that name a competitor, and in none that names the
    brand."""

    domain: str
    category: str
    n: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _counts(tally: Tally) -> BucketCounts:
    b = tally.buckets
    return BucketCounts(
        planned=sum(b.values()),
        succeeded=b["succeeded"],
        failed=b["failed"],
        invalid=b["invalid"],
        review=b["review"],
        pending=b["pending"],
        cancelled=b["cancelled"],
    )


def _category_counts(tally: Tally, classes: Classifier | None) -> Counter[str]:
    found: Counter[str] = Counter()
    if classes is not None:
        for domain, n in tally.domains.items():
            found[classes.category(domain)] += n
    return found


def _metrics(
    key: str,
    label: str,
    tally: Tally,
    *,
    brand: str,
    entities: list[str],
    classes: Classifier | None = None,
) -> Metrics:
    counts = _counts(tally)
    # A sample a cancel ended was never asked: it says nothing about the brand, so it leaves
    # the denominator; a failed, invalid or pending one stays in it (docs/decisions.md,
    # "Cancelled samples in the run's status").
    asked = counts.planned - counts.cancelled
    categories = _category_counts(tally, classes)
    mentioned = tally.mentioned
    pairs = sum(mentioned[e] for e in entities)
    ordered = sorted(tally.domains.items(), key=lambda kv: (-kv[1], kv[0]))
    return Metrics(
        key=key,
        label=label,
        counts=counts,
        mention_rate=rate(mentioned[brand], asked),
        entity_mention_rates={e: rate(mentioned[e], asked) for e in entities},
        share_of_voice={e: rate(mentioned[e], pairs) for e in entities},
        first_rank=RankStat(
            mean=tally.rank_sum / tally.rank_n if tally.rank_n else None, n=tally.rank_n
        ),
        citation_share=rate(tally.brand_citations, tally.citations),
        citations_unparseable=tally.unparseable,
        top_domains=ordered[:TOP_DOMAINS],
        found_not_cited=tally.found,
        category_share={
            c: rate(n, tally.citations)
            for c, n in sorted(categories.items(), key=lambda kv: (-kv[1], kv[0]))
        },
        entity_citation_share={
            e: rate(tally.entity_citations[e], tally.citations) for e in entities
        },
    )


# --- the checks -------------------------------------------------------------------------


def _conservation(where: str, counts: dict[str, int], planned: int) -> list[str]:
    total = sum(counts.get(b, 0) for b in BUCKETS)
    if total == planned:
        return []
    terms = " + ".join(f"{b} {counts.get(b, 0)}" for b in BUCKETS)
    return [f"{where}: conservation broken: {terms} = {total}, planned = {planned}"]


@dataclass(frozen=True)
class Check:
    name: str
    detail: str

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "detail": self.detail}


# Counter columns (sampling/counters.py) and how the record scan's buckets give them.
_COUNTER_FROM_SCAN: dict[str, Callable[[Counter[str]], int]] = {
    "samples": lambda b: sum(b.values()),
    "succeeded": lambda b: b["succeeded"],
    "failed": lambda b: b["failed"] + b["cancelled"],  # the counters count them as failed
    "invalid": lambda b: b["invalid"],
    "review": lambda b: b["review"],
    "terminal": lambda b: sum(b.values()) - b["pending"],
}


def _counter_differences(run: Run, groups: Groups) -> list[str]:
    """The counters that run_status reads, per platform, against the record scan: the scan is
    the full pass, so this is the counters' cross-check without a second pass over samples."""
    counted = counters.counts_by_platform(run_id=run.pk)
    out = []
    for platform in sorted(set(counted) | set(groups.by_platform)):
        buckets = groups.by_platform.get(platform, Tally()).buckets
        for column, from_scan in _COUNTER_FROM_SCAN.items():
            value = counted[platform][column] if platform in counted else 0
            drift = counters.Drift(str(run.pk), platform, column, value, from_scan(buckets))
            if drift.counter != drift.scanned:
                out.append(str(drift))
    return out


def _scan_differences(run: Run, groups: Groups) -> list[str]:
    planned = run.planned_samples
    overall = groups.overall.buckets
    differences = _conservation("record scan", dict(overall), planned)
    if sum(overall.values()) != planned:
        differences.append(
            f"record scan: {sum(overall.values())} sample records, planned = {planned}"
        )
    if overall["unclassified"]:
        ids = ", ".join(str(i) for i in unclassified_ids(run.pk))
        differences.append(
            f"record scan: {overall['unclassified']} finished sample(s) in no bucket (ids {ids})"
        )
    for question, tally in sorted(groups.by_question.items()):
        counts = dict(tally.buckets)
        differences += _conservation(f"question revision {question}", counts, sum(counts.values()))
    return differences


def _mentioned_by_mention_rows(sentiment: list[SentimentStat], brand: str) -> int:
    """The brand's mentioned rows over the revision's mention rows of the succeeded samples
    (the sentiment's count: by sample, not through the analysed capture)."""
    return sum(stat.mentioned for stat in sentiment if stat.entity == brand)


def _verify(
    run: Run, groups: Groups, revision: AnalysisRevision | None, sentiment: list[SentimentStat]
) -> list[Check]:
    brand = RunConfig.of(run).brand.name
    planned = run.planned_samples
    status = run_status(run_id=run.pk)
    differences = _counter_differences(run, groups)
    # The report's partition (BUCKETS): failed without the cancelled, which are apart.
    partition = {**status.as_dict(), "failed": status.failed_not_cancelled}
    differences += _conservation("SQL aggregate (run_status)", partition, planned)
    differences += _scan_differences(run, groups)
    scanned = _counts(groups.overall)
    for name in STATUS_BUCKETS:
        by_scan = getattr(scanned, name) + (scanned.cancelled if name == "failed" else 0)
        if getattr(status, name) != by_scan:
            differences.append(
                f"run: {name} by record scan = {by_scan}, "
                f"by status aggregation = {getattr(status, name)}"
            )
    if status.cancelled != scanned.cancelled:
        differences.append(
            f"run: cancelled by record scan = {scanned.cancelled}, "
            f"by status aggregation = {status.cancelled}"
        )
    by_rows = _mentioned_by_mention_rows(sentiment, brand)
    if groups.overall.mentioned[brand] != by_rows:
        differences.append(
            f"run: brand_mentioned by record scan = {groups.overall.mentioned[brand]}, "
            f"by SQL aggregate = {by_rows}"
        )
    recount = second_count(run, revision, scanned.succeeded) if revision else None
    if recount is not None:
        differences += [f"second count: {d}" for d in recount.differences[:20]]
        if len(recount.differences) > 20:
            differences.append(f"second count: {len(recount.differences) - 20} more differences")
    if differences:
        raise ReportIntegrityError(run.pk, differences)
    return [
        Check(
            "conservation",
            f"succeeded {scanned.succeeded} + failed {scanned.failed} + cancelled "
            f"{scanned.cancelled} + invalid {scanned.invalid} + review {scanned.review} + "
            f"pending {scanned.pending} = planned {planned}",
        ),
        Check(
            "double count",
            "bucket counts of the record scan agree with the trigger-maintained counters per "
            "platform and with the status aggregation; brand mentions through the analysed "
            "captures agree with the revision's mention rows",
        ),
        _second_count_check(recount),
    ]


def _second_count_check(recount: SecondCount | None) -> Check:
    if recount is None:
        return Check("second count", "no analysis revision yet: nothing to re-derive")
    if recount.skipped:
        return Check("second count", f"not re-derived: {recount.skipped}")
    return Check(
        "second count",
        f"mentions re-derived from the stored answer text for {recount.records} of "
        f"{recount.of} succeeded records agree with the stored results",
    )


# --- breakdowns by target, region, device and mode ------------------------------------


@dataclass(frozen=True)
class Breakdown:
    """The run's metrics per value of one dimension of its targets: `target` (when a
    platform has several targets), `region`, `device` or `mode` (when the run has more than
    one of it). The groups add up to the run, as the platforms do."""

    dimension: str
    groups: list[Metrics]

    def as_dict(self) -> dict[str, Any]:
        return {"dimension": self.dimension, "groups": [m.as_dict() for m in self.groups]}


def _dimensions(config: RunConfig) -> list[str]:
    """The breakdowns a run's targets call for, in the order the report shows them."""
    targets = [(t.platform, t.device, t.region, t.mode) for t in config.targets]
    platforms = [t[0] for t in targets]
    wanted = ["target"] if len(set(platforms)) < len(platforms) else []
    for index, part in enumerate(TARGET_PARTS[1:], start=1):
        if len({t[index] for t in targets}) > 1:
            wanted.append(part)
    return wanted


def _breakdowns(
    run: Run, config: RunConfig, revision_id: int | None, metrics: Callable[..., Metrics]
) -> list[Breakdown]:
    """One more pass over the run's rows, grouped per target, when the run has more than one
    target of a platform or more than one region, device or mode; rolled up per dimension."""
    dimensions = _dimensions(config)
    if not dimensions:
        return []
    brand, domains = config.brand.name, list(config.brand.domains)
    entity_domains = {c.name: list(c.domains) for c in (config.brand, *config.competitors)}
    per_target = run_groups(
        run.pk, revision_id, brand, domains, SENTIMENTS, by_target=True,
        entity_domains=entity_domains,
    ).by_platform  # fmt: skip
    out = []
    for dimension in dimensions:
        rolled: dict[str, Tally] = {}
        for key, tally in per_target.items():
            parts = dict(zip(TARGET_PARTS, key.split("|"), strict=True))
            label = " / ".join(parts.values()) if dimension == "target" else parts[dimension]
            rolled.setdefault(label, Tally()).add(tally)
        groups = [metrics(label, label, tally) for label, tally in sorted(rolled.items())]
        out.append(Breakdown(dimension=dimension, groups=groups))
    return out


# --- the report -------------------------------------------------------------------------


@dataclass(frozen=True)
class TrendPoint:
    run_id: str
    created_at: datetime
    counts: BucketCounts
    mention_rate: Rate
    share_of_voice: Rate
    citation_share: Rate
    first_rank: RankStat

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "created_at": self.created_at.isoformat(),
            "counts": self.counts.as_dict(),
            "mention_rate": self.mention_rate.as_dict(),
            "share_of_voice": self.share_of_voice.as_dict(),
            "citation_share": self.citation_share.as_dict(),
            "first_mention_rank": self.first_rank.as_dict(),
        }


@dataclass(frozen=True)
class RunReport:
    run_id: str
    tenant: str
    campaign: str
    brand: str
    competitors: list[str]
    brand_domains: list[str]
    created_at: datetime
    finished_at: datetime | None
    outcome: str
    generated_at: datetime
    overall: Metrics
    by_platform: list[Metrics]
    by_question: list[Metrics]
    over_time: list[TrendPoint] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    revision: dict[str, Any] = field(default_factory=dict)
    sentiment: list[SentimentStat] = field(default_factory=list)
    head_to_head: list[HeadToHead] = field(default_factory=list)
    evidence: list[EvidenceSummary] = field(default_factory=list)
    cancelled_at: datetime | None = None  # the run was cancelled (its samples: `cancelled`)
    breakdowns: list[Breakdown] = field(default_factory=list)
    searches: list[SearchStat] = field(default_factory=list)
    opportunities: list[SourceOpportunity] = field(default_factory=list)
    classification_version: str = ""  # of the shipped domain categories the figures use

    @property
    def cancelled(self) -> bool:
        return self.cancelled_at is not None

    @property
    def entities(self) -> list[str]:
        return [self.brand, *self.competitors]

    def as_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "tenant": self.tenant,
            "campaign": self.campaign,
            "brand": self.brand,
            "competitors": self.competitors,
            "brand_domains": self.brand_domains,
            "created_at": self.created_at.isoformat(),
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "outcome": self.outcome,
            "generated_at": self.generated_at.isoformat(),
            "denominator": "planned samples",
            "overall": self.overall.as_dict(),
            "by_platform": [m.as_dict() for m in self.by_platform],
            "by_question": [m.as_dict() for m in self.by_question],
            "over_time": [p.as_dict() for p in self.over_time],
            "checks": [c.as_dict() for c in self.checks],
            "analysis_revision": self.revision,
            "sentiment": [s.as_dict() for s in self.sentiment],
            "head_to_head": [h.as_dict() for h in self.head_to_head],
            "evidence_by_platform": [e.as_dict() for e in self.evidence],
            "cancelled": self.cancelled,
            "cancelled_at": self.cancelled_at.isoformat() if self.cancelled_at else None,
            "breakdowns": [b.as_dict() for b in self.breakdowns],
            "searches": [s.as_dict() for s in self.searches],
            "source_opportunities": [o.as_dict() for o in self.opportunities],
            "domain_classification_version": self.classification_version,
        }


def _question_labels(
    campaign_id: int, revision_ids: Iterable[int]
) -> dict[int, tuple[tuple[int, int], str]]:
    """Sort key and label of each question revision. Read by the campaign (an index on
    question.campaign), then by id whichever are not the campaign's (none: a run asks its
    campaign's questions); 10,000 ids in one `IN` list cost several times more."""
    wanted = set(revision_ids)
    # Plain tuples: a run can ask 10,000 questions, and model instances cost ten times more.
    fields = ("pk", "question__position", "question_id", "revision_no", "text")
    rows = list(
        QuestionRevision.objects.filter(question__campaign_id=campaign_id).values_list(*fields)
    )
    others = wanted - {row[0] for row in rows}
    if others:
        rows += QuestionRevision.objects.filter(pk__in=sorted(others)).values_list(*fields)
    return {
        pk: ((position, question_id), f"r{revision_no}: {text}")
        for pk, position, question_id, revision_no, text in rows
        if pk in wanted
    }


@dataclass(frozen=True)
class _Checked:
    overall: Metrics
    by_platform: list[Metrics]
    by_question: list[Metrics]
    checks: list[Check]
    head_to_head: list[HeadToHead]
    sentiment: list[SentimentStat]
    evidence: list[EvidenceSummary]
    breakdowns: list[Breakdown] = field(default_factory=list)
    searches: list[SearchStat] = field(default_factory=list)
    opportunities: list[SourceOpportunity] = field(default_factory=list)
    classification_version: str = ""


def _classifier(run: Run, config: RunConfig) -> Classifier:
    """The run's domain categories: its brand and competitors' domains, its tenant's
    overrides, the shipped classification."""
    overrides = dict(
        DomainCategory.objects.filter(tenant_id=run.tenant_id).values_list("domain", "category")
    )
    entities = [(config.brand.name, config.brand.domains)]
    entities += [(c.name, c.domains) for c in config.competitors]
    return classifier(brand=config.brand.name, entities=entities, overrides=overrides)


def _searches(groups: Groups, labels: dict[int, tuple[tuple[int, int], str]]) -> list[SearchStat]:
    """The most run queries per question (in the campaign's order) and platform."""

    def order(key: tuple[str, int]) -> tuple[Any, ...]:
        platform, question = key
        return (labels[question][0] if question in labels else (0, question), platform)

    found = []
    for platform, question in sorted(groups.searches, key=order):
        label = labels.get(question, ((0, 0), f"revision {question}"))[1]
        ranked = sorted(
            groups.searches[(platform, question)].items(), key=lambda kv: (-kv[1], kv[0])
        )
        found += [SearchStat(label, platform, q, n) for q, n in ranked[:TOP_SEARCHES]]
    return found


def _opportunities(groups: Groups, classes: Classifier) -> list[SourceOpportunity]:
    """Domains cited beside a competitor and never beside the brand, by the answers citing
    them; the brand's and the competitors' own domains are not opportunities."""
    found = []
    for domain, (competitor, brand) in groups.cited_beside.items():
        category = classes.category(domain)
        if competitor and not brand and category not in (OWN, COMPETITOR):
            found.append(SourceOpportunity(domain, category, competitor))
    found.sort(key=lambda o: (-o.n, o.domain))
    return found[:TOP_OPPORTUNITIES]


def _checked_metrics(
    run: Run,
    revision: AnalysisRevision | None,
    *,
    with_breakdowns: bool = False,
    with_sources: bool = False,
) -> _Checked:
    config = RunConfig.of(run)
    brand = config.brand.name
    entities = config.entity_names
    domains = list(config.brand.domains)
    revision_id = revision.pk if revision else None
    entity_domains = {c.name: list(c.domains) for c in (config.brand, *config.competitors)}
    groups = run_groups(
        run.pk, revision_id, brand, domains, SENTIMENTS, entity_domains=entity_domains,
        sources=with_sources,
    )  # fmt: skip
    sentiment = sentiment_distribution(groups.sentiments, entities) if revision else []
    checks = _verify(run, groups, revision, sentiment)
    classes = _classifier(run, config)

    def metrics(key: str, label: str, tally: Tally) -> Metrics:
        return _metrics(key, label, tally, brand=brand, entities=entities, classes=classes)

    overall = metrics("all", "All platforms and questions", groups.overall)
    by_platform = [metrics(p, p, t) for p, t in sorted(groups.by_platform.items())]
    labels = _question_labels(run.campaign_id, groups.by_question)
    ordered = sorted(
        groups.by_question, key=lambda rid: labels[rid][0] if rid in labels else (0, rid)
    )
    by_question = [
        metrics(str(rid), labels.get(rid, ((0, 0), f"revision {rid}"))[1], groups.by_question[rid])
        for rid in ordered
    ]
    return _Checked(
        overall=overall,
        by_platform=by_platform,
        by_question=by_question,
        checks=checks,
        head_to_head=head_to_head(groups.pairs),
        sentiment=sentiment,
        evidence=evidence_summaries(groups.evidence),
        breakdowns=_breakdowns(run, config, revision_id, metrics) if with_breakdowns else [],
        searches=_searches(groups, labels),
        opportunities=_opportunities(groups, classes),
        classification_version=classes.version,
    )


def _trend(run: Run, current: Metrics) -> list[TrendPoint]:
    """The campaign's runs up to and including this one, oldest first; each one checked."""
    runs = list(
        Run.objects.filter(campaign_id=run.campaign_id, created_at__lte=run.created_at).order_by(
            "-created_at"
        )[:TREND_RUNS]
    )
    brand = RunConfig.of(run).brand.name
    points = []
    for past in reversed(runs):
        metrics = (
            current
            if past.pk == run.pk
            else _checked_metrics(past, current_revision(run_id=past.pk)).overall
        )
        points.append(
            TrendPoint(
                run_id=str(past.pk),
                created_at=past.created_at,
                counts=metrics.counts,
                mention_rate=metrics.mention_rate,
                share_of_voice=metrics.share_of_voice.get(brand, rate(0, 0)),
                citation_share=metrics.citation_share,
                first_rank=metrics.first_rank,
            )
        )
    return points


def _revision(run: Run, number: int | None) -> AnalysisRevision | None:
    if number is None:
        return current_revision(run_id=run.pk)
    try:
        return AnalysisRevision.objects.get(run_id=run.pk, number=number)
    except AnalysisRevision.DoesNotExist:
        raise ReportIntegrityError(run.pk, [f"run has no analysis revision {number}"]) from None


def _revision_summary(revision: AnalysisRevision | None) -> dict[str, Any]:
    if revision is None:
        return {}
    return {
        "number": revision.number,
        "analyser": revision.analyser,
        "analyser_version": revision.analyser_version,
        "state": revision.state,
    }


def build_run_report(
    *, run_id: UUID | str, with_trend: bool = True, revision: int | None = None
) -> RunReport:
    """The checked report of one run (plus the campaign's runs up to it, over time), from
    analysis revision `revision` (default: the newest finished one, see
    `analysis.services.current_revision`).

    Raises `ReportIntegrityError` if conservation, the double count or the second count
    fails for this run or for any run in the trend; `Run.DoesNotExist` for an unknown run.
    """
    with transaction.atomic():
        scan_settings()  # work_mem for the scans below, this transaction only
        return _build_run_report(run_id=run_id, with_trend=with_trend, revision=revision)


def _build_run_report(*, run_id: UUID | str, with_trend: bool, revision: int | None) -> RunReport:
    run = Run.objects.select_related("campaign", "tenant").get(pk=run_id)
    chosen = _revision(run, revision)
    checked = _checked_metrics(run, chosen, with_breakdowns=True, with_sources=True)
    config = RunConfig.of(run)
    competitors = [c.name for c in config.competitors]
    status = run_status(run_id=run.pk)
    return RunReport(
        run_id=str(run.pk),
        tenant=run.tenant.slug,
        campaign=run.campaign.name,
        brand=config.brand.name,
        competitors=competitors,
        brand_domains=list(config.brand.domains),
        created_at=run.created_at,
        finished_at=run.finished_at,
        outcome=status.outcome.value,
        generated_at=datetime.now(UTC),
        overall=checked.overall,
        by_platform=checked.by_platform,
        by_question=checked.by_question,
        over_time=_trend(run, checked.overall) if with_trend else [],
        checks=checked.checks,
        revision=_revision_summary(chosen),
        sentiment=checked.sentiment,
        head_to_head=checked.head_to_head,
        evidence=checked.evidence,
        cancelled_at=run.cancelled_at,
        breakdowns=checked.breakdowns,
        searches=checked.searches,
        opportunities=checked.opportunities,
        classification_version=checked.classification_version,
    )
