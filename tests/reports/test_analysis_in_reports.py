"""Reports over analysis revisions: mentions in context, the independent second count, and
metrics aggregated in SQL (sentiment, head-to-head), each checked against the stored rows."""

from __future__ import annotations

from typing import Any

import pytest
from django.db.models.functions import Now

from analysis.models import AnalysisRevision, Mention
from analysis.reports import ReportIntegrityError, build_run_report
from analysis.services import reanalyse_samples, start_reanalysis
from evidence.models import Capture
from sampling.models import Run, Sample
from simulator import SimulatorHandle
from tests.factories import capture_row
from tests.reports.conftest import collected_run

pytestmark = pytest.mark.django_db

APPLE = {"name": "Apple", "aliases": ["苹果"], "domains": ["apple.com"]}
ABSENCE = "I couldn't find any reliable information about Acme."
BREAKFAST = "早餐吃了苹果和小米粥。"


def _run_with_apple() -> Run:
    return collected_run(questions=2, repeats=2, name="apple", more_competitors=[APPLE])


def _recollect(sample: Sample, text: str) -> Capture:
    """A newer completed capture of the sample with this answer (as an evidence repair)."""
    last = sample.captures.order_by("-revision").first()
    return capture_row(
        sample=sample,
        revision=(last.revision if last else 0) + 1,
        collection_state="completed",
        answer_text=text,
        captured_at=Now(),
    )


def _reanalyse_in_process(run: Run, analyser: str | None = None) -> AnalysisRevision:
    revision = start_reanalysis(run_id=run.pk, analyser=analyser)
    ids = list(Sample.objects.filter(run=run).values_list("id", flat=True))
    reanalyse_samples(revision_id=revision.pk, sample_ids=ids)
    revision.refresh_from_db()
    assert revision.state == "done"
    return revision


def _succeeded(run: Run) -> Any:
    return Sample.objects.filter(
        run=run, analysis_state="accepted", validity="valid", collection_state="completed"
    ).order_by("id")


def test_the_issue_sentences_are_not_counted_in_a_report(simulator: SimulatorHandle) -> None:
    run = _run_with_apple()
    absent, breakfast = list(_succeeded(run)[:2])
    _recollect(absent, ABSENCE)
    _recollect(breakfast, BREAKFAST)
    revision = _reanalyse_in_process(run)

    rows = {(m.sample_id, m.entity): m for m in Mention.objects.filter(revision=revision)}
    acme = rows[(absent.pk, "Acme")]
    assert (acme.context, acme.mentioned, acme.rank, acme.matched) == ("absence", False, None, 1)
    apple = rows[(breakfast.pk, "Apple")]
    assert (apple.context, apple.mentioned, apple.matched) == ("other_sense", False, 1)

    report = build_run_report(run_id=run.pk)
    assert report.revision["number"] == revision.number
    counted = Mention.objects.filter(
        revision=revision, sample__in=_succeeded(run), entity="Acme", mentioned=True
    )
    assert report.overall.mention_rate.successes == counted.count()
    assert not counted.filter(sample=absent).exists()
    assert report.overall.entity_mention_rates["Apple"].successes == 0
    assert "agree with the stored results" in report.checks[-1].detail


def test_a_corrupted_stored_mention_refuses_the_report_naming_the_sample(
    simulator: SimulatorHandle,
) -> None:
    run = collected_run(questions=2, repeats=2)
    assert build_run_report(run_id=run.pk, with_trend=False)  # clean: builds
    victim = Mention.objects.filter(sample__run=run, mentioned=True).order_by("id").first()
    assert victim is not None
    # Counts stay equal (the record scan and the SQL aggregate still agree with each other):
    # only re-deriving from the answer text can see this.
    Mention.objects.filter(pk=victim.pk).update(context="negative", sentiment="negative")

    with pytest.raises(ReportIntegrityError) as refused:
        build_run_report(run_id=run.pk, with_trend=False)

    assert any(
        d.startswith(f"second count: sample {victim.sample_id}: {victim.entity}: context")
        for d in refused.value.differences
    ), refused.value.differences


def test_a_dropped_mention_count_is_caught_by_the_second_count_alone(
    simulator: SimulatorHandle,
) -> None:
    run = collected_run(questions=1, repeats=2)
    victim = Mention.objects.filter(sample__run=run, mentioned=True).order_by("id").first()
    assert victim is not None
    Mention.objects.filter(pk=victim.pk).update(mentioned=False)

    with pytest.raises(ReportIntegrityError) as refused:
        build_run_report(run_id=run.pk, with_trend=False)

    assert f"second count: sample {victim.sample_id}: {victim.entity}: mentioned stored False" in (
        " ".join(refused.value.differences)
    )
    assert not any(d.startswith("run: brand_mentioned") for d in refused.value.differences)


def test_reports_are_built_from_any_revision(simulator: SimulatorHandle) -> None:
    run = collected_run(questions=2, repeats=1)
    second = _reanalyse_in_process(run)

    one = build_run_report(run_id=run.pk, with_trend=False, revision=1)
    two = build_run_report(run_id=run.pk, with_trend=False, revision=second.number)
    default = build_run_report(run_id=run.pk, with_trend=False)

    assert (one.revision["number"], two.revision["number"]) == (1, 2)
    assert default.revision["number"] == 2  # the newest finished re-analysis
    assert one.overall.as_dict() == two.overall.as_dict()  # same analyser version
    with pytest.raises(ReportIntegrityError, match="no analysis revision 9"):
        build_run_report(run_id=run.pk, revision=9)


def test_a_revision_older_than_the_evidence_is_refused_naming_the_sample(
    simulator: SimulatorHandle,
) -> None:
    run = collected_run(questions=1, repeats=2)
    sample = _succeeded(run).first()
    assert sample is not None
    capture = _recollect(sample, ABSENCE)  # repaired evidence, not yet re-analysed

    with pytest.raises(ReportIntegrityError) as refused:
        build_run_report(run_id=run.pk, with_trend=False)
    assert (
        f"second count: sample {sample.pk}: stored mentions are not on its latest capture "
        f"{capture.pk}" in refused.value.differences
    )

    _reanalyse_in_process(run)
    assert build_run_report(run_id=run.pk, with_trend=False).revision["number"] == 2


def test_sentiment_and_head_to_head_match_the_stored_rows(simulator: SimulatorHandle) -> None:
    run = collected_run(questions=2, repeats=2)
    report = build_run_report(run_id=run.pk, with_trend=False)
    revision = AnalysisRevision.objects.get(run=run, number=1)
    rows = list(Mention.objects.filter(revision=revision, sample__in=_succeeded(run)))

    for stat in report.sentiment:
        mine = [m for m in rows if m.entity == stat.entity and m.mentioned]
        assert stat.mentioned == len(mine)
        for sentiment, share in stat.shares.items():
            assert share.successes == sum(m.sentiment == sentiment for m in mine)
            assert share.n == len(mine)
        assert stat.recommended.successes == sum(m.recommended for m in mine)

    by_sample: dict[int, dict[str, Mention]] = {}
    for m in rows:
        by_sample.setdefault(m.sample_id, {})[m.entity] = m
    question_of = dict(Sample.objects.filter(run=run).values_list("id", "question_revision_id"))
    assert report.head_to_head
    for h2h in report.head_to_head:
        pairs = [
            (e["Acme"], e[h2h.competitor])
            for sid, e in by_sample.items()
            if question_of[sid] == h2h.question_revision_id
        ]
        both = [(b, c) for b, c in pairs if b.mentioned and c.mentioned]
        assert h2h.answers == len(pairs)
        assert h2h.both == len(both)
        assert h2h.brand_ahead.successes == sum((b.rank or 0) < (c.rank or 0) for b, c in both)
        assert h2h.brand_only == sum(b.mentioned and not c.mentioned for b, c in pairs)
        assert h2h.brand_ahead.as_dict()["confidence"] in ("none", "very low")
    data = report.as_dict()
    assert data["analysis_revision"]["analyser"] == "rules"
    assert {s["entity"] for s in data["sentiment"]} == {"Acme", "Globex", "Initech"}
