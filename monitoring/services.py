"""Writing the metrics series (monitoring.models): a run's rows, from the report's own SQL.

When: after every run's end (a run-end follower, registered in monitoring/apps.py, writes an
outbox row whose task is `write_series`) and after every analysis revision that finishes (a
revision follower, analysis.services.follow_revision_done, the same way). The task rewrites
the run's rows from its current revision (analysis.services.current_revision) in one
transaction: the rows are deleted and inserted again, so a redelivered or repeated task
leaves the same rows, and a newer revision replaces the older one's.

What: `analysis.report_scan.run_cells`, the report's three passes (samples per bucket with
sampling/buckets.py, mentions through the analysed captures, citations) grouped per target
and question revision instead of rolled up per platform and per question. Each cell is
summed into the row scopes (all questions, each topic, each question); nothing here
classifies a sample or a mention again. pipeline/invariants.py (check `series`, registered
in monitoring/apps.py) compares the rows with the report of the same run.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, timedelta
from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import Max, Sum
from django.db.models.functions import Now

from analysis.analysers import get_analyser
from analysis.models import AnalysisRevision
from analysis.report_scan import CellTally, run_cells, scan_settings
from analysis.services import RevisionDone, current_revision
from evidence.models import ReviewDecision
from pipeline.runs import RunEnded
from sampling import counters
from sampling.models import QuestionRevision, Run
from sampling.services import complete_outbox, enqueue_outbox
from sampling.snapshots import RunConfig

from .models import COUNTS, ComparabilityKey, SeriesRow

log = logging.getLogger(__name__)

WRITE_SERIES = "monitoring.write_series"


@dataclass(frozen=True)
class SeriesWritten:
    """What a follower of a run's series is told: the run, and the write it follows (the
    outbox message's id, or "direct"): one per write, the same when a write is repeated."""

    run_id: UUID
    write: str


# A follower writes outbox rows in the writer's transaction and does nothing else (no network,
# no commit), idempotently: the layers above (alerts) register by name from AppConfig.ready,
# as pipeline/runs.py `follow_run_end` (monitoring does not import them).
SeriesFollower = Callable[[SeriesWritten], None]
_followers: dict[str, SeriesFollower] = {}


def follow_series_written(*, name: str, follower: SeriesFollower) -> None:
    """Register what an upper layer does after a run's rows are (re)written. By name."""
    _followers[name] = follower


SENTIMENT_COUNTS = {"positive": "positive", "negative": "negative"}


# --- when: followers and the task ----------------------------------------------------------


def record_run_end(ended: RunEnded) -> None:
    """The run-end follower: the run's rows are (re)written after its end, in each round."""
    enqueue_outbox(
        task=WRITE_SERIES,
        payload={"run_id": str(ended.run_id)},
        dedupe_key=f"series:{ended.run_id}:end:{ended.round}",
    )


def record_revision_done(done: RevisionDone) -> None:
    """The revision follower: a finished re-analysis rewrites the run's rows from it."""
    enqueue_outbox(
        task=WRITE_SERIES,
        payload={"run_id": str(done.run_id)},
        dedupe_key=f"series:{done.run_id}:revision:{done.revision_id}",
    )


def write_series(*, run_id: UUID | str, outbox_id: int | None = None) -> int:
    """Rewrite the run's rows from its current analysis revision, in one transaction that
    also completes the outbox message. A run not finished has no rows yet (its end writes
    them). Returns how many rows the run has now."""
    with transaction.atomic():
        scan_settings()
        run = Run.objects.select_related("campaign").get(pk=run_id)
        if run.finished_at is None:
            complete_outbox(outbox_id=outbox_id)
            return 0
        rows, keys = series_rows(run=run)
        ComparabilityKey.objects.bulk_create(
            [ComparabilityKey(digest=d, parts=p) for d, p in keys.items()],
            ignore_conflicts=True,
        )
        SeriesRow.objects.filter(run_id=run.pk).delete()
        SeriesRow.objects.bulk_create(rows, batch_size=2000)
        written = SeriesWritten(
            run_id=UUID(str(run.pk)), write=str(outbox_id) if outbox_id else "direct"
        )
        for follower in _followers.values():
            follower(written)
        complete_outbox(outbox_id=outbox_id)
    log.info("series written run=%s rows=%d", run.pk, len(rows))
    return len(rows)


# --- what: the rows of one run -------------------------------------------------------------


def digest(parts: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


@dataclass
class _Sums:
    """A row's counts, summed over the cells of its scope."""

    values: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))
    questions: dict[int, int] = field(default_factory=dict)  # question id -> revision id

    def add(self, cell: CellTally, entity: str) -> None:
        v = self.values
        b = cell.buckets
        v["planned"] += sum(b.values())
        v["valid"] += b["succeeded"]
        v["failed"] += b["failed"] + b["cancelled"]
        v["evidence_missing"] += cell.evidence_missing
        v["mentioned"] += cell.mentioned[entity]
        counts = cell.entities.get(entity)
        if counts is not None:
            v["ranked"] += counts.ranked
            v["first_position"] += counts.first
            v["position_sum"] += counts.rank_sum
            v["rated"] += counts.rows.mentioned
            v["recommended"] += counts.rows.recommended
            for column, sentiment in SENTIMENT_COUNTS.items():
                v[column] += counts.rows.by_sentiment[sentiment]
            v["own_citations"] += counts.own_citations
        v["citations"] += cell.citations


def _analyser(revision: AnalysisRevision | None) -> tuple[str, str]:
    if revision is not None:
        return revision.analyser, revision.analyser_version
    try:  # no answer analysed yet: what revision 1 would have frozen
        info = get_analyser().info
    except Exception:  # an analyser that cannot be built here measures nothing yet
        return "", ""
    return info.name, info.version


def series_rows(*, run: Run) -> tuple[list[SeriesRow], dict[str, dict[str, Any]]]:
    """The run's rows (unsaved) and the parts of their comparability keys (digest -> parts)."""
    config = RunConfig.of(run)
    revision = current_revision(run_id=run.pk)
    brand = config.brand.name
    entities = config.entity_names
    domains = {e.name: list(e.domains) for e in config.entities}
    cells = run_cells(
        run.pk, revision.pk if revision else None, brand, domains, ("positive", "negative")
    )
    question_of, topics_of = _questions(config, {q for _, q in cells})
    analyser, version = _analyser(revision)
    assert run.finished_at is not None
    at = run.finished_at
    day = at.astimezone(UTC).date()
    # (target, scope) -> entity -> sums; scope: ("", None) all, (topic, None), ("", question)
    sums: dict[tuple[str, tuple[str, int | None]], dict[str, _Sums]] = defaultdict(dict)
    for (target, revision_id), cell in cells.items():
        question = question_of.get(revision_id, 0)
        scopes: list[tuple[str, int | None]] = [("", None), ("", question)]
        scopes += [(topic, None) for topic in topics_of.get(revision_id, ())]
        for scope in scopes:
            per_entity = sums[(target, scope)]
            for entity in entities:
                row = per_entity.setdefault(entity, _Sums())
                row.add(cell, entity)
                row.questions[question] = revision_id
    rows: list[SeriesRow] = []
    keys: dict[str, dict[str, Any]] = {}
    for (target, (topic, asked)), per_entity in sums.items():
        platform, device, region, mode = target.split("|")
        # Every entity of a scope was summed over the same cells: one key for all of them.
        questions = next(iter(per_entity.values())).questions
        parts = {
            "platform": platform,
            "region": region,
            "device": device,
            "mode": mode,
            "model": config.model_for(platform),
            "analyser": analyser,
            "analyser_version": version,
            "questions": sorted([q, r] for q, r in questions.items()),
        }
        key = digest(parts)
        keys[key] = parts
        for entity, row in per_entity.items():
            rows.append(
                SeriesRow(
                    tenant_id=run.tenant_id,
                    campaign_id=run.campaign_id,
                    run_id=run.pk,
                    at=at,
                    day=day,
                    platform=platform,
                    region=region,
                    device=device,
                    mode=mode,
                    topic=topic,
                    question_id=asked or None,
                    entity=entity,
                    is_brand=entity == brand,
                    analysis_revision=revision.number if revision else 0,
                    comparability_key=key,
                    **row.values,
                )
            )
    return rows, keys


def _questions(
    config: RunConfig, revision_ids: Iterable[int]
) -> tuple[dict[int, int], dict[int, tuple[str, ...]]]:
    """Per question revision: its question, and its topics as frozen with the run."""
    question_of: dict[int, int] = {}
    topics_of: dict[int, tuple[str, ...]] = {}
    for q in config.questions or ():
        question_of[q.revision_id] = q.question_id
        topics_of[q.revision_id] = tuple(q.topics or ())
    missing = set(revision_ids) - set(question_of)
    if missing:  # a snapshot read without its questions (never at a run's end)
        question_of |= dict(
            QuestionRevision.objects.filter(pk__in=missing).values_list("pk", "question_id")
        )
    return question_of, topics_of


# --- repair: runs whose buckets moved after their end ----------------------------------------

REVIEW_WINDOW = timedelta(days=2)


def refresh_reviewed_series(*, limit: int = 50) -> int:
    """The dispatcher's sweep (registered in monitoring/apps.py): a reviewer's decision after
    a run's end moves a sample out of `review` (succeeded or failed) and changes the run's
    figures, with no run end to follow. For the runs with decisions in the last
    REVIEW_WINDOW whose rows' succeeded and failed counts per platform no longer equal the
    run's counters (sampling/counters.py), the series is written again (one outbox row per
    newest decision). Returns how many runs it queued."""
    recent = ReviewDecision.objects.filter(created_at__gte=Now() - REVIEW_WINDOW)
    latest = recent.values("sample__run_id").annotate(last=Max("id")).order_by("-last")[:limit]
    queued = 0
    for item in latest:
        run_id = item["sample__run_id"]
        sums = (
            SeriesRow.objects.filter(run_id=run_id, is_brand=True, topic="", question=None)
            .values("platform")
            .annotate(valid=Sum("valid"), failed=Sum("failed"))
        )
        rows = {r["platform"]: (int(r["valid"]), int(r["failed"])) for r in sums}
        if not rows:
            continue  # no series yet: the run's end writes it
        counted = {
            platform: (c["succeeded"], c["failed"])
            for platform, c in counters.counts_by_platform(run_id=run_id).items()
        }
        if rows == counted:
            continue
        with transaction.atomic():
            enqueue_outbox(
                task=WRITE_SERIES,
                payload={"run_id": str(run_id)},
                dedupe_key=f"series:{run_id}:review:{item['last']}",
            )
        queued += 1
    return queued


def refresh_every() -> float:
    return 60.0
