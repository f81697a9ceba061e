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
      it is part of the equation. It is checked for the SQL aggregate (the one status
      aggregation service, `sampling.selectors.run_status`, plus grouped SQL counts) and for
      the record scan, and the scan must find exactly `run.planned_samples` sample rows.
    * Double count: the bucket counts, brand-mentioned samples and citation counts are
      computed (a) by scanning the records in Python with a classifier written here, and
      (b) by SQL aggregates; overall, per platform and per question they must be equal.
    * Second count (analysis.second_count): mentions re-derived from the stored answer text
      with the revision's analyser must equal the stored rows, field by field, for every
      succeeded sample (a deterministic 10,000 of them in larger runs). The double count
      reads the same rows twice; only this one would see an analyser bug or a bad row.

A report reads one analysis revision (`revision=N`, default the newest finished one, see
`analysis.services.current_revision`). A mention counts only in a counted context (not
absence or other_sense: analysis.results).

Metrics (computed from the scanned records, once the checks have passed)
    * mention rate: succeeded samples whose analysed capture mentions the entity / planned;
    * share of voice: the entity's (sample, entity) mention pairs / all pairs of the brand
      and its competitors, over succeeded samples;
    * average first-mention rank of the brand (1 = mentioned first), n = samples where the
      brand was mentioned;
    * citation share: citations whose host is one of the brand's domains (or a subdomain) /
      all citations of succeeded samples' analysed captures;
    * top cited registrable domains (offline public-suffix list);
    * in SQL (analysis.report_sql): sentiment distribution and recommendation rate per
      entity, and competitor head-to-head per question.
    Every rate carries n, a Wilson 95% interval and a confidence label (`analysis.stats`).

The analysed capture of a sample is its latest completed capture, as in
`analysis.services.analyse_sample`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from django.db.models import Count, Exists, OuterRef, Q, QuerySet, Subquery

from evidence.models import Capture, Citation
from sampling import counters
from sampling.models import Run, Sample
from sampling.selectors import FAILED, INVALID, REVIEW, SUCCEEDED, TERMINAL, run_status

from .domains import cited_domain_share, top_cited_domains
from .evidence_summary import EvidenceSummary, evidence_by_platform
from .models import AnalysisRevision, Mention
from .report_sql import HeadToHead, SentimentStat, head_to_head, sentiment_distribution
from .second_count import SecondCount, second_count
from .services import current_revision
from .stats import Rate, rate

__all__ = [
    "BUCKETS",
    "Counts",
    "Metrics",
    "RankStat",
    "ReportIntegrityError",
    "RunReport",
    "TrendPoint",
    "build_run_report",
]

BUCKETS = ("succeeded", "failed", "invalid", "review", "pending")
TREND_RUNS = 12
TOP_DOMAINS = 10


class ReportIntegrityError(Exception):
    """The report's numbers do not add up; `differences` names each one."""

    def __init__(self, run_id: object, differences: list[str]) -> None:
        self.run_id = run_id
        self.differences = differences
        super().__init__(f"report for run {run_id} refused: " + "; ".join(differences))


# --- records ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SampleRecord:
    id: int
    platform: str
    question_revision_id: int
    bucket: str
    analysed_capture_id: int | None


def classify(row: Mapping[str, Any]) -> str | None:
    """A sample's bucket from its layers, written independently of the SQL filters in
    `sampling.selectors`. None: a finished sample that fits no bucket (a bug to report)."""
    completed = row["collection_state"] == "completed"
    if completed and row["analysis_state"] == "accepted" and row["validity"] == "valid":
        return "succeeded"
    if row["queue_state"] != "done":
        return "pending"
    if completed and row["validity"] == "invalid":
        return "invalid"
    if completed and row["analysis_state"] == "review":
        return "review"
    if row["collection_state"] == "failed" or (completed and row["analysis_state"] == "failed"):
        return "failed"
    return None


def _analysed_capture_ids(sample_ids: list[int]) -> dict[int, int]:
    latest: dict[int, tuple[int, int]] = {}
    rows = Capture.objects.filter(
        sample_id__in=sample_ids, collection_state="completed"
    ).values_list("sample_id", "revision", "id")
    for sample_id, revision, capture_id in rows:
        if sample_id not in latest or revision > latest[sample_id][0]:
            latest[sample_id] = (revision, capture_id)
    return {sample_id: capture_id for sample_id, (_rev, capture_id) in latest.items()}


@dataclass
class _Scan:
    records: list[SampleRecord]
    unclassified: list[int]
    # capture id -> {entity: (mentioned, rank)}
    mentions: dict[int, dict[str, tuple[bool, int | None]]]
    citations: dict[int, list[str]]  # capture id -> normalized URLs


def _scan(run: Run, revision_id: int | None) -> _Scan:
    rows = list(
        Sample.objects.filter(run_id=run.pk)
        .order_by("id")
        .values(
            "id",
            "platform",
            "question_revision_id",
            "collection_state",
            "analysis_state",
            "validity",
            "queue_state",
        )
    )
    buckets = {row["id"]: classify(row) for row in rows}
    succeeded_ids = [sid for sid, bucket in buckets.items() if bucket == "succeeded"]
    analysed = _analysed_capture_ids(succeeded_ids)
    records = [
        SampleRecord(
            id=row["id"],
            platform=row["platform"],
            question_revision_id=row["question_revision_id"],
            bucket=buckets[row["id"]] or "unclassified",
            analysed_capture_id=analysed.get(row["id"]),
        )
        for row in rows
    ]
    capture_ids = list(analysed.values())
    mentions: dict[int, dict[str, tuple[bool, int | None]]] = defaultdict(dict)
    for capture_id, entity, mentioned, rank in Mention.objects.filter(
        capture_id__in=capture_ids, revision_id=revision_id
    ).values_list("capture_id", "entity", "mentioned", "rank"):
        mentions[capture_id][entity] = (mentioned, rank)
    citations: dict[int, list[str]] = defaultdict(list)
    for capture_id, url, normalized in (
        Citation.objects.filter(capture_id__in=capture_ids)
        .order_by("capture_id", "position")
        .values_list("capture_id", "url", "normalized_url")
    ):
        citations[capture_id].append(normalized or url)
    return _Scan(
        records=records,
        unclassified=[sid for sid, bucket in buckets.items() if bucket is None],
        mentions=dict(mentions),
        citations=dict(citations),
    )


# --- metrics ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Counts:
    planned: int
    succeeded: int
    failed: int
    invalid: int
    review: int
    pending: int

    @property
    def bucket_sum(self) -> int:
        return self.succeeded + self.failed + self.invalid + self.review + self.pending

    def as_dict(self) -> dict[str, int]:
        return {
            "planned": self.planned,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "invalid": self.invalid,
            "review": self.review,
            "pending": self.pending,
        }


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
    counts: Counts
    mention_rate: Rate  # brand, over planned
    entity_mention_rates: dict[str, Rate]  # brand and competitors, over planned
    share_of_voice: dict[str, Rate]  # brand and competitors, over all mention pairs
    first_rank: RankStat  # brand
    citation_share: Rate  # brand's domains, over all citations
    citations_unparseable: int
    top_domains: list[tuple[str, int]]

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
        }


def _counts(records: Iterable[SampleRecord]) -> Counts:
    tally = Counter(r.bucket for r in records)
    return Counts(
        planned=sum(tally.values()),
        succeeded=tally["succeeded"],
        failed=tally["failed"],
        invalid=tally["invalid"],
        review=tally["review"],
        pending=tally["pending"],
    )


def _metrics(
    key: str,
    label: str,
    records: list[SampleRecord],
    scan: _Scan,
    *,
    brand: str,
    entities: list[str],
    brand_domains: list[str],
) -> Metrics:
    counts = _counts(records)
    succeeded = [r for r in records if r.bucket == "succeeded"]
    mentioned_samples: Counter[str] = Counter()
    ranks: list[int] = []
    urls: list[str] = []
    for record in succeeded:
        if record.analysed_capture_id is None:
            continue
        found = scan.mentions.get(record.analysed_capture_id, {})
        for entity in entities:
            is_mentioned, entity_rank = found.get(entity, (False, None))
            if is_mentioned:
                mentioned_samples[entity] += 1
                if entity == brand and entity_rank is not None:
                    ranks.append(entity_rank)
        urls.extend(scan.citations.get(record.analysed_capture_id, []))
    pairs = sum(mentioned_samples[e] for e in entities)
    share = cited_domain_share(urls, brand_domains)
    return Metrics(
        key=key,
        label=label,
        counts=counts,
        mention_rate=rate(mentioned_samples[brand], counts.planned),
        entity_mention_rates={e: rate(mentioned_samples[e], counts.planned) for e in entities},
        share_of_voice={e: rate(mentioned_samples[e], pairs) for e in entities},
        first_rank=RankStat(mean=sum(ranks) / len(ranks) if ranks else None, n=len(ranks)),
        citation_share=share.rate,
        citations_unparseable=share.unparseable,
        top_domains=top_cited_domains(urls, limit=TOP_DOMAINS),
    )


# --- the second route: SQL aggregates ---------------------------------------------------


def _sql_grouped(run: Run, group: str, revision_id: int | None) -> dict[str, dict[str, int]]:
    """Bucket, brand-mention and citation counts per group value, by SQL aggregate."""
    brand = run.config_snapshot["brand"]["name"]
    analysed = Subquery(
        Capture.objects.filter(sample_id=OuterRef("pk"), collection_state="completed")
        .order_by("-revision")
        .values("id")[:1]
    )
    samples: QuerySet[Sample] = Sample.objects.filter(run_id=run.pk).annotate(
        analysed_capture=analysed
    )
    samples = samples.annotate(
        brand_mentioned=Exists(
            Mention.objects.filter(
                capture_id=OuterRef("analysed_capture"),
                entity=brand,
                mentioned=True,
                revision_id=revision_id,
            )
        )
    )
    aggregates = {
        "planned": Count("id"),
        "succeeded": Count("id", filter=SUCCEEDED),
        "failed": Count("id", filter=FAILED & TERMINAL),
        "invalid": Count("id", filter=INVALID & TERMINAL),
        "review": Count("id", filter=REVIEW & TERMINAL),
        "terminal": Count("id", filter=TERMINAL),
        "brand_mentioned_n": Count("id", filter=SUCCEEDED & Q(brand_mentioned=True)),
    }
    rows: list[dict[str, Any]] = (
        list(samples.values(group).annotate(**aggregates).order_by())
        if group
        else [samples.aggregate(**aggregates)]
    )
    out: dict[str, dict[str, int]] = {}
    for row in rows:
        key = str(row[group]) if group else "all"
        out[key] = {
            "planned": row["planned"],
            "succeeded": row["succeeded"],
            "failed": row["failed"],
            "invalid": row["invalid"],
            "review": row["review"],
            "pending": row["planned"] - row["terminal"],
            "brand_mentioned": row["brand_mentioned_n"],
        }
    citation_rows = (
        Citation.objects.filter(
            capture__sample__run_id=run.pk,
            capture_id__in=Subquery(
                Sample.objects.filter(SUCCEEDED, run_id=run.pk)
                .annotate(analysed_capture=analysed)
                .values("analysed_capture")
            ),
        )
        .values(f"capture__sample__{group}" if group else "capture__sample__run_id")
        .annotate(n=Count("id"))
        .order_by()
    )
    for row in citation_rows:
        key = str(row[f"capture__sample__{group}"]) if group else "all"
        out.setdefault(key, {})["citations"] = row["n"]
    for counts in out.values():
        counts.setdefault("citations", 0)
    return out


def _scan_grouped(
    scan: _Scan, group: Callable[[SampleRecord], str], brand: str
) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for record in scan.records:
        counts = out.setdefault(
            group(record),
            {
                "planned": 0,
                **dict.fromkeys(BUCKETS, 0),
                "brand_mentioned": 0,
                "citations": 0,
            },
        )
        counts["planned"] += 1
        if record.bucket in BUCKETS:
            counts[record.bucket] += 1
        if record.bucket == "succeeded" and record.analysed_capture_id is not None:
            mentioned, _rank = scan.mentions.get(record.analysed_capture_id, {}).get(
                brand, (False, None)
            )
            counts["brand_mentioned"] += int(mentioned)
            counts["citations"] += len(scan.citations.get(record.analysed_capture_id, []))
    return out


def _compare(
    scope: str, scanned: dict[str, dict[str, int]], aggregated: dict[str, dict[str, int]]
) -> list[str]:
    differences = []
    for key in sorted(set(scanned) | set(aggregated)):
        a = scanned.get(key, {})
        b = aggregated.get(key, {})
        for name in ("planned", *BUCKETS, "brand_mentioned", "citations"):
            if a.get(name, 0) != b.get(name, 0):
                where = scope if key == "all" else f"{scope} {key}"
                differences.append(
                    f"{where}: {name} by record scan = {a.get(name, 0)}, "
                    f"by SQL aggregate = {b.get(name, 0)}"
                )
    return differences


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


def _verify(run: Run, scan: _Scan, revision: AnalysisRevision | None) -> list[Check]:
    brand = run.config_snapshot["brand"]["name"]
    planned = run.planned_samples
    differences: list[str] = []

    status = run_status(run_id=run.pk)
    differences += [str(d) for d in counters.drift(run_id=run.pk)]
    differences += _conservation("SQL aggregate (run_status)", status.as_dict(), planned)
    scan_all = _scan_grouped(scan, lambda r: "all", brand)
    scanned_counts = scan_all.get("all", {"planned": 0})
    differences += _conservation("record scan", scanned_counts, planned)
    if scanned_counts["planned"] != planned:
        differences.append(
            f"record scan: {scanned_counts['planned']} sample records, planned = {planned}"
        )
    if scan.unclassified:
        ids = ", ".join(str(i) for i in scan.unclassified[:10])
        differences.append(
            f"record scan: {len(scan.unclassified)} finished sample(s) in no bucket (ids {ids})"
        )
    for name in BUCKETS:
        if getattr(status, name) != scanned_counts.get(name, 0):
            differences.append(
                f"run: {name} by record scan = {scanned_counts.get(name, 0)}, "
                f"by status aggregation = {getattr(status, name)}"
            )
    revision_id = revision.pk if revision else None
    differences += _compare("run", scan_all, _sql_grouped(run, "", revision_id))
    differences += _compare(
        "platform",
        _scan_grouped(scan, lambda r: r.platform, brand),
        _sql_grouped(run, "platform", revision_id),
    )
    differences += _compare(
        "question revision",
        _scan_grouped(scan, lambda r: str(r.question_revision_id), brand),
        _sql_grouped(run, "question_revision_id", revision_id),
    )
    recount = second_count(run, revision) if revision else None
    if recount is not None:
        differences += [f"second count: {d}" for d in recount.differences[:20]]
        if len(recount.differences) > 20:
            differences.append(f"second count: {len(recount.differences) - 20} more differences")
    if differences:
        raise ReportIntegrityError(run.pk, differences)
    counts = Counts(**{k: scanned_counts[k] for k in ("planned", *BUCKETS)})
    return [
        Check(
            "conservation",
            f"succeeded {counts.succeeded} + failed {counts.failed} + invalid {counts.invalid}"
            f" + review {counts.review} + pending {counts.pending} = planned {planned}",
        ),
        Check(
            "double count",
            "bucket, brand-mention and citation counts agree between the record scan and the "
            "SQL aggregates, for the run, each platform and each question",
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


# --- the report -------------------------------------------------------------------------


@dataclass(frozen=True)
class TrendPoint:
    run_id: str
    created_at: datetime
    counts: Counts
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
        }


def _question_labels(scan: _Scan) -> dict[int, tuple[tuple[int, int], str]]:
    from sampling.models import QuestionRevision

    revision_ids = {r.question_revision_id for r in scan.records}
    labels = {}
    for rev in QuestionRevision.objects.filter(pk__in=revision_ids).select_related("question"):
        labels[rev.pk] = (
            (rev.question.position, rev.question_id),
            f"r{rev.revision_no}: {rev.text}",
        )
    return labels


def _checked_metrics(
    run: Run, revision: AnalysisRevision | None
) -> tuple[Metrics, list[Metrics], list[Metrics], list[Check]]:
    snapshot = run.config_snapshot
    brand = snapshot["brand"]["name"]
    entities = [brand, *(c["name"] for c in snapshot.get("competitors", []))]
    domains = list(snapshot["brand"].get("domains", []))
    scan = _scan(run, revision.pk if revision else None)
    checks = _verify(run, scan, revision)

    def metrics(key: str, label: str, records: list[SampleRecord]) -> Metrics:
        return _metrics(
            key, label, records, scan, brand=brand, entities=entities, brand_domains=domains
        )

    overall = metrics("all", "All platforms and questions", scan.records)
    by_platform_records: dict[str, list[SampleRecord]] = defaultdict(list)
    by_question_records: dict[int, list[SampleRecord]] = defaultdict(list)
    for record in scan.records:
        by_platform_records[record.platform].append(record)
        by_question_records[record.question_revision_id].append(record)
    by_platform = [metrics(p, p, rs) for p, rs in sorted(by_platform_records.items())]
    labels = _question_labels(scan)
    ordered = sorted(
        by_question_records, key=lambda rid: labels[rid][0] if rid in labels else (0, rid)
    )
    by_question = [
        metrics(str(rid), labels.get(rid, ((0, 0), f"revision {rid}"))[1], by_question_records[rid])
        for rid in ordered
    ]
    return overall, by_platform, by_question, checks


def _trend(run: Run, current: Metrics) -> list[TrendPoint]:
    """The campaign's runs up to and including this one, oldest first; each one checked."""
    runs = list(
        Run.objects.filter(campaign_id=run.campaign_id, created_at__lte=run.created_at).order_by(
            "-created_at"
        )[:TREND_RUNS]
    )
    brand = run.config_snapshot["brand"]["name"]
    points = []
    for past in reversed(runs):
        metrics = (
            current
            if past.pk == run.pk
            else _checked_metrics(past, current_revision(run_id=past.pk))[0]
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
    run = Run.objects.select_related("campaign", "tenant").get(pk=run_id)
    chosen = _revision(run, revision)
    overall, by_platform, by_question, checks = _checked_metrics(run, chosen)
    snapshot = run.config_snapshot
    brand = snapshot["brand"]["name"]
    competitors = [c["name"] for c in snapshot.get("competitors", [])]
    status = run_status(run_id=run.pk)
    return RunReport(
        run_id=str(run.pk),
        tenant=run.tenant.slug,
        campaign=run.campaign.name,
        brand=brand,
        competitors=competitors,
        brand_domains=list(snapshot["brand"].get("domains", [])),
        created_at=run.created_at,
        finished_at=run.finished_at,
        outcome=status.outcome.value,
        generated_at=datetime.now(UTC),
        overall=overall,
        by_platform=by_platform,
        by_question=by_question,
        over_time=_trend(run, overall) if with_trend else [],
        checks=checks,
        revision=_revision_summary(chosen),
        sentiment=sentiment_distribution(run, chosen.pk, [brand, *competitors]) if chosen else [],
        head_to_head=head_to_head(run, chosen.pk) if chosen else [],
        evidence=evidence_by_platform(run_id=run.pk),
    )
