"""The series' invariant (registered with pipeline/invariants.py from monitoring/apps.py):
a run's series rows say what its report says.

For every run with rows (or the one run asked about): the rows are of the run's current
analysis revision, and their sums give the report's figures of that revision, per platform
(planned, succeeded, each entity's mentions, the brand's ranks and own-domain citations, all
citations), per question and overall (with each entity's sentiment and recommendation
counts). The rows come from `analysis.report_scan.run_cells`, the report's passes grouped per
target and question revision; the report rolls the same base up per platform and per
question: any difference is a bug in one of the two groupings or rows left stale.
A run whose run end was followed (its series outbox row completed) has rows.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any
from uuid import UUID

from analysis.reports import Metrics, ReportIntegrityError, RunReport, build_run_report
from analysis.services import current_revision
from pipeline.invariants import LIMIT, Violation
from sampling.models import OutboxMessage, Run
from sampling.snapshots import RunConfig

from .models import COUNTS, SeriesRow

NAME = "series"


def check_series(run_id: UUID | str | None = None) -> list[Violation]:
    runs = SeriesRow.objects.values_list("run_id", flat=True).distinct()
    if run_id is not None:
        runs = runs.filter(run_id=run_id)
    found: list[Violation] = []
    for rid in sorted({str(r) for r in runs} - _being_rewritten(run_id)):
        found += _check_run(rid)
    found += _followed_without_rows(run_id)
    if len(found) > LIMIT:
        more = Violation(NAME, f"... and {len(found) - LIMIT} more violations of this kind")
        return [*found[:LIMIT], more]
    return found


def _being_rewritten(run_id: UUID | str | None) -> set[str]:
    """Runs whose rows are about to be rewritten: a series outbox row not yet completed (a
    re-analysis, a review, a run end), or a run finished again after a resume whose end has
    not queued its series yet (its run-finished event's followers have not run). They are
    checked once the writer is done, not against the figures it has yet to write."""
    series = OutboxMessage.objects.filter(dedupe_key__startswith="series:")
    resumed = Run.objects.filter(resumes__gt=0, finished_at__isnull=False)
    if run_id is not None:
        series = series.filter(dedupe_key__startswith=f"series:{run_id}:")
        resumed = resumed.filter(pk=run_id)
    pending = series.filter(completed_at__isnull=True).values_list("dedupe_key", flat=True)
    known = set(series.values_list("dedupe_key", flat=True))
    ended_unfollowed = {
        str(pk)
        for pk, resumes in resumed.values_list("pk", "resumes")
        if f"series:{pk}:end:{resumes}" not in known
    }
    return {str(key).split(":")[1] for key in pending} | ended_unfollowed


def _followed_without_rows(run_id: UUID | str | None) -> list[Violation]:
    done = OutboxMessage.objects.filter(
        dedupe_key__startswith="series:", completed_at__isnull=False
    )
    if run_id is not None:
        done = done.filter(dedupe_key__startswith=f"series:{run_id}:")
    followed = {str(key).split(":")[1] for key in done.values_list("dedupe_key", flat=True)}
    with_rows = {
        str(r)
        for r in SeriesRow.objects.filter(run_id__in=list(followed))
        .values_list("run_id", flat=True)
        .distinct()
    }
    finished = {
        str(r)
        for r in Run.objects.filter(pk__in=list(followed), finished_at__isnull=False)
        .exclude(planned_samples=0)
        .values_list("pk", flat=True)
    }
    return [
        Violation(NAME, f"run {rid}: its series was written and has no rows", run_id=rid)
        for rid in sorted(finished - with_rows)
    ]


def _check_run(rid: str) -> list[Violation]:
    revisions = set(
        SeriesRow.objects.filter(run_id=rid).values_list("analysis_revision", flat=True)
    )
    current = current_revision(run_id=rid)
    number = current.number if current else 0
    if revisions != {number}:
        return [
            Violation(
                NAME,
                f"run {rid}: series rows of analysis revision(s) {sorted(revisions)}, "
                f"the run's current revision is {number}",
                run_id=rid,
            )
        ]
    try:
        report = build_run_report(run_id=rid, with_trend=False, revision=number or None)
    except ReportIntegrityError:
        return []  # the report's own check (report_counts) names what is wrong
    return [Violation(NAME, f"run {rid}: {d}", run_id=rid) for d in differences(rid, report)]


def _sums(rid: str, *, by: str) -> dict[str, dict[str, dict[str, int]]]:
    """group (platform, or question id for by="question", or "all") -> entity -> counts."""
    rows = SeriesRow.objects.filter(run_id=rid)
    rows = (
        rows.filter(question__isnull=False)
        if by == "question"
        else rows.filter(question__isnull=True, topic="")
    )
    out: dict[str, dict[str, dict[str, int]]] = defaultdict(dict)
    for row in rows.values("platform", "question_id", "entity", *COUNTS):
        group = {"platform": str(row["platform"]), "question": str(row["question_id"])}.get(
            by, "all"
        )
        entity = out[group].setdefault(row["entity"], dict.fromkeys(COUNTS, 0))
        for name in COUNTS:
            entity[name] += int(row[name])
    return out


def differences(rid: str, report: RunReport) -> list[str]:
    """Where the run's rows and its report disagree, in words (empty: they agree)."""
    out: list[str] = []
    brand = report.brand
    platforms = _sums(rid, by="platform")
    overall = _sums(rid, by="all")
    reported = {m.key: m for m in report.by_platform}
    for platform in sorted(set(platforms) | set(reported)):
        out += _compare(
            f"platform {platform}", platforms.get(platform, {}), reported.get(platform), brand
        )
    out += _compare("overall", overall.get("all", {}), report.overall, brand)
    # Per question: the report keys its rows by question revision; the rows by question.
    by_question = _sums(rid, by="question")
    revision_question = _revision_questions(rid)
    for metrics in report.by_question:
        question = str(revision_question.get(int(metrics.key), metrics.key))
        out += _compare(
            f"question {question}", by_question.get(question, {}), metrics, brand, short=True
        )
    totals = overall.get("all", {})
    for stat in report.sentiment:
        counts = totals.get(stat.entity, dict.fromkeys(COUNTS, 0))
        expected = {
            "rated": stat.mentioned,
            "recommended": stat.recommended.successes,
            "positive": stat.shares["positive"].successes,
            "negative": stat.shares["negative"].successes,
        }
        for name, value in expected.items():
            if counts[name] != value:
                out.append(f"{stat.entity}: {name} by series = {counts[name]}, by report = {value}")
    return out


def _revision_questions(rid: str) -> dict[int, int]:
    run = Run.objects.get(pk=rid)
    return {q.revision_id: q.question_id for q in RunConfig.of(run).questions or ()}


def _compare(
    where: str,
    entities: dict[str, dict[str, int]],
    metrics: Metrics | None,
    brand: str,
    *,
    short: bool = False,
) -> list[str]:
    if metrics is None:
        return [f"{where}: in the series, not in the report"]
    if not entities:
        return [f"{where}: in the report, not in the series"]
    out: list[str] = []
    any_row = next(iter(entities.values()))
    expected: dict[str, Any] = {
        "planned": metrics.counts.planned,
        "valid": metrics.counts.succeeded,
        "failed": metrics.counts.failed + metrics.counts.cancelled,
    }
    if not short:
        expected["citations"] = metrics.citation_share.n
    for name, value in expected.items():
        if any_row[name] != value:
            out.append(f"{where}: {name} by series = {any_row[name]}, by report = {value}")
    for entity, rate_ in metrics.entity_mention_rates.items():
        got = entities.get(entity, {}).get("mentioned", 0)
        if got != rate_.successes:
            out.append(
                f"{where}: {entity} mentioned by series = {got}, by report = {rate_.successes}"
            )
    if not short and brand in entities:
        row = entities[brand]
        if row["own_citations"] != metrics.citation_share.successes:
            out.append(
                f"{where}: own-domain citations by series = {row['own_citations']}, "
                f"by report = {metrics.citation_share.successes}"
            )
        if row["ranked"] != metrics.first_rank.n:
            out.append(
                f"{where}: ranked by series = {row['ranked']}, by report = {metrics.first_rank.n}"
            )
        mean = row["position_sum"] / row["ranked"] if row["ranked"] else None
        if (mean is None) != (metrics.first_rank.mean is None) or (
            mean is not None
            and metrics.first_rank.mean is not None
            and abs(mean - metrics.first_rank.mean) > 1e-9
        ):
            out.append(
                f"{where}: average position by series = {mean}, "
                f"by report = {metrics.first_rank.mean}"
            )
    return out
