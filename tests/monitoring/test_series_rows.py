"""The metrics series: a run's rows come from the report's passes and agree with its report."""

from __future__ import annotations

import pytest
from django.utils import timezone

from analysis.reports import build_run_report
from monitoring.checks import check_series
from monitoring.models import SeriesRow
from monitoring.services import write_series
from pipeline.runs import finish_run_if_done, on_run_finished
from sampling.models import Run
from simulator import SimulatorHandle
from tests.reports.conftest import collected_run

pytestmark = pytest.mark.django_db


def _finished(run: Run) -> Run:
    finish_run_if_done(run_id=run.pk)  # what the last step's commit does
    run.refresh_from_db()
    assert run.finished_at is not None
    return run


def test_rows_of_a_run_add_up_to_its_report(simulator: SimulatorHandle) -> None:
    simulator.script(
        {"match": "number 1:", "fault": "auth_error", "platform": "perplexity", "times": None}
    )
    run = _finished(collected_run(questions=3, repeats=2))
    written = write_series(run_id=run.pk)
    report = build_run_report(run_id=run.pk, with_trend=False)

    rows = SeriesRow.objects.filter(run=run)
    assert rows.count() == written
    entities = report.entities
    # 2 targets x 3 entities x (all + 3 questions), no topics
    assert written == 2 * len(entities) * 4
    overall = rows.filter(topic="", question__isnull=True)
    brand = [r for r in overall if r.entity == report.brand]
    assert sum(r.planned for r in brand) == report.overall.counts.planned == 12
    assert sum(r.valid for r in brand) == report.overall.counts.succeeded
    assert sum(r.failed for r in brand) == 2
    for entity in entities:
        mentioned = sum(r.mentioned for r in overall if r.entity == entity)
        assert mentioned == report.overall.entity_mention_rates[entity].successes
    assert sum(r.citations for r in brand) == report.overall.citation_share.n
    assert sum(r.own_citations for r in brand) == report.overall.citation_share.successes
    assert {r.comparability_key for r in brand} and all(r.at == run.finished_at for r in brand)
    assert check_series(run.pk) == []


def test_rewriting_a_runs_rows_is_idempotent(simulator: SimulatorHandle) -> None:
    run = _finished(collected_run(questions=2, repeats=1))
    first = write_series(run_id=run.pk)
    assert write_series(run_id=run.pk) == first == SeriesRow.objects.filter(run=run).count()
    snapshot = _rows(run)
    assert write_series(run_id=run.pk) == first
    assert _rows(run) == snapshot


def _rows(run: Run) -> list[str]:
    fields = ("entity", "platform", "topic", "question_id", "mentioned", "comparability_key")
    return sorted(str(row) for row in SeriesRow.objects.filter(run=run).values_list(*fields))


def test_the_run_end_writes_the_series_through_the_outbox(simulator: SimulatorHandle) -> None:
    from sampling.models import OutboxMessage

    run = _finished(collected_run(questions=1, repeats=1))
    on_run_finished(run_id=run.pk)
    message = OutboxMessage.objects.get(dedupe_key=f"series:{run.pk}:end:0")
    assert message.task == "monitoring.write_series" and message.completed_at is None
    write_series(run_id=run.pk, outbox_id=message.pk)
    message.refresh_from_db()
    assert message.completed_at is not None
    assert SeriesRow.objects.filter(run=run).exists()


def test_a_finished_reanalysis_rewrites_the_rows_from_its_revision(
    simulator: SimulatorHandle,
) -> None:
    from analysis.services import REANALYSE_TASK, reanalyse_samples, start_reanalysis
    from sampling.models import OutboxMessage

    run = _finished(collected_run(questions=1, repeats=2))
    write_series(run_id=run.pk)
    assert set(SeriesRow.objects.filter(run=run).values_list("analysis_revision", flat=True)) == {1}
    revision = start_reanalysis(run_id=run.pk)
    for message in OutboxMessage.objects.filter(task=REANALYSE_TASK):
        reanalyse_samples(**message.payload, outbox_id=message.pk)
    follow = OutboxMessage.objects.get(dedupe_key=f"series:{run.pk}:revision:{revision.pk}")
    # The rows are of revision 1, the run's is 2 now: not a violation while their rewrite is
    # queued, one once nothing will rewrite them (the message done, the write lost).
    assert check_series(run.pk) == []
    OutboxMessage.objects.filter(pk=follow.pk).update(completed_at=timezone.now())
    assert check_series(run.pk)
    write_series(run_id=run.pk, outbox_id=follow.pk)
    assert set(SeriesRow.objects.filter(run=run).values_list("analysis_revision", flat=True)) == {2}
    assert check_series(run.pk) == []


def test_check_invariants_names_a_row_that_disagrees_with_the_report(
    simulator: SimulatorHandle,
) -> None:
    from pipeline.invariants import check_all

    run = _finished(collected_run(questions=1, repeats=1))
    write_series(run_id=run.pk)
    assert [v for v in check_all(run.pk) if v.invariant == "series"] == []
    row = SeriesRow.objects.filter(run=run, is_brand=True, topic="", question=None).first()
    assert row is not None
    SeriesRow.objects.filter(pk=row.pk).update(planned=row.planned + 1, mentioned=row.mentioned + 1)
    found = [str(v) for v in check_all(run.pk) if v.invariant == "series"]
    assert any(f"platform {row.platform}: planned by series" in v for v in found), found
    assert any("overall: planned by series" in v for v in found), found
    assert any(f"{row.entity} mentioned by series" in v for v in found), found


def test_rows_that_a_later_review_made_stale_are_written_again_by_the_sweep(
    simulator: SimulatorHandle,
) -> None:
    from evidence.models import ReviewDecision
    from monitoring.services import refresh_reviewed_series
    from pipeline.sweeps import registered_sweeps
    from sampling.models import OutboxMessage, Sample

    assert "monitoring.reviewed_series" in registered_sweeps()
    run = _finished(collected_run(questions=1, repeats=1))
    write_series(run_id=run.pk)
    sample = Sample.objects.filter(run=run).order_by("id").first()
    assert sample is not None
    decision = ReviewDecision.objects.create(
        sample=sample,
        decision="acknowledged",
        analysis_state_before=sample.analysis_state,
        analysis_state_after=sample.analysis_state,
    )
    assert refresh_reviewed_series() == 0  # the rows still say what the counters say
    # What a decision that moved a sample out of review leaves: rows behind the counters.
    row = SeriesRow.objects.filter(run=run, is_brand=True, topic="", question=None).first()
    assert row is not None and row.valid > 0
    SeriesRow.objects.filter(run=run, platform=row.platform).update(valid=row.valid - 1)
    assert refresh_reviewed_series() == 1
    message = OutboxMessage.objects.get(dedupe_key=f"series:{run.pk}:review:{decision.pk}")
    assert refresh_reviewed_series() == 1  # the same row, not another (dedupe key)
    assert (
        OutboxMessage.objects.filter(dedupe_key__startswith=f"series:{run.pk}:review").count() == 1
    )
    write_series(run_id=run.pk, outbox_id=message.pk)
    assert refresh_reviewed_series() == 0
    assert check_series(run.pk) == []
