"""Gauges read at scrape time: from the database (cheap, indexed counts, cached for a few
seconds so frequent scrapes cost one query each), and ratios from the counters the workers
recorded (never a scan of the samples table)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any

from django.db.models import Count, Q
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from billing.reconciliation import MATCHED, reconcile
from pipeline.invariants import gap_counts
from sampling.models import QueueState, Sample, SubmissionState

CACHE_SECONDS = 10.0
RECONCILIATION_WINDOW = timedelta(hours=24)
_cache: dict[str, tuple[float, Any]] = {}


def _cached(key: str, compute: Any) -> Any:
    now = time.monotonic()
    hit = _cache.get(key)
    if hit is None or now - hit[0] > CACHE_SECONDS:
        hit = (now, compute())
        _cache[key] = hit
    return hit[1]


def attention_counts() -> dict[str, dict[str, int]]:
    """Per platform: leased (published, not finished), uncertain and parked samples. One
    grouped query over the rows in those states (the leased ones through their partial
    index), not over the table."""
    rows = (
        Sample.objects.filter(
            Q(queue_state__in=[QueueState.LEASED, QueueState.PARKED])
            | Q(submission_state=SubmissionState.UNCERTAIN)
        )
        .values("platform")
        .annotate(
            leased=Count("id", filter=Q(queue_state=QueueState.LEASED)),
            parked=Count("id", filter=Q(queue_state=QueueState.PARKED)),
            uncertain=Count("id", filter=Q(submission_state=SubmissionState.UNCERTAIN)),
        )
        .order_by()
    )
    return {r["platform"]: {k: r[k] for k in ("leased", "parked", "uncertain")} for r in rows}


def reconciliation_differences() -> tuple[int, dict[str, int]]:
    """Rows of the last day's reconciliation that do not match, and the absolute amount
    they differ by, per currency (minor units)."""
    report = reconcile(start=timezone.now() - RECONCILIATION_WINDOW)
    count, amounts = 0, dict[str, int]()
    for row in report.rows:
        if row.status == MATCHED:
            continue
        count += 1
        currency = row.cost_currency or row.charge_currency
        amounts[currency] = amounts.get(currency, 0) + abs(row.difference)
    return count, amounts


def evidence_missing_ratio(metrics: Iterable[Metric]) -> dict[str, float]:
    """(partial + failed) / settled evidence per platform, from geo_evidence_recorded_total."""
    totals: dict[str, float] = {}
    missing: dict[str, float] = {}
    for metric in metrics:
        if metric.name != "geo_evidence_recorded":
            continue
        for sample in metric.samples:
            if not sample.name.endswith("_total"):
                continue
            platform = sample.labels["platform"]
            totals[platform] = totals.get(platform, 0.0) + sample.value
            if sample.labels["state"] != "stored":
                missing[platform] = missing.get(platform, 0.0) + sample.value
    return {p: missing.get(p, 0.0) / t for p, t in totals.items() if t}


class DatabaseCollector(Collector):
    """The gauges of the README's table that are state, not events."""

    def __init__(self, recorded: Collector) -> None:
        self.recorded = recorded  # the processes' counters, for ratios

    def collect(self) -> Iterator[Metric]:
        counts = _cached("attention", attention_counts)
        yield _by_platform(
            "geo_messages_unacked", "Steps published, not finished.", counts, "leased"
        )
        yield _by_platform(
            "geo_samples_uncertain", "Samples whose acceptance is unknown.", counts, "uncertain"
        )
        yield _by_platform("geo_samples_parked", "Samples waiting for a person.", counts, "parked")
        ratio = GaugeMetricFamily(
            "geo_evidence_missing_ratio",
            "Share of settled samples whose evidence is partial or failed.",
            labels=["platform"],
        )
        for platform, value in sorted(evidence_missing_ratio(self.recorded.collect()).items()):
            ratio.add_metric([platform], value)
        yield ratio
        count, amounts = _cached("reconciliation", reconciliation_differences)
        recon = GaugeMetricFamily(
            "geo_reconciliation_differences",
            "Unmatched reconciliation rows of the last 24 h: their count, and the amount they "
            "differ by (minor units, per currency).",
            labels=["measure", "currency"],
        )
        recon.add_metric(["count", ""], count)
        for currency, amount in sorted(amounts.items()):
            recon.add_metric(["amount", currency], amount)
        yield recon
        gaps = GaugeMetricFamily(
            "geo_integrity_gaps",
            "What check_invariants names after a run's end, counted: finished runs still "
            "holding money, outbox events published and never completed, attempts left started "
            "on finished samples, answers whose upstream cost was never booked.",
            labels=["gap"],
        )
        for gap, value in sorted(_cached("gaps", gap_counts).items()):
            gaps.add_metric([gap], value)
        yield gaps


def _by_platform(name: str, doc: str, counts: dict[str, dict[str, int]], key: str) -> Metric:
    family = GaugeMetricFamily(name, doc, labels=["platform"])
    for platform, values in sorted(counts.items()):
        family.add_metric([platform], values[key])
    if not counts:
        family.add_metric(["all"], 0)
    return family
