"""The report reads mention and citation rows by the run, platform and question revision they
carry (docs/decisions.md, "The report reads mentions and citations per run"): the write paths
fill those columns, a repaired capture names the one it supersedes, and the report's numbers
equal those of the joins it replaced (samples -> latest completed capture -> rows)."""

from __future__ import annotations

from collections import Counter

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from analysis.models import Mention
from analysis.reports import build_run_report
from analysis.services import reanalyse_samples, start_reanalysis
from evidence.models import Capture, Citation
from sampling.counters import run_param
from sampling.models import Sample
from simulator import SimulatorHandle
from tests.evidence.helpers import record_result, result
from tests.reports.conftest import collected_run

pytestmark = pytest.mark.django_db

# The joins the report made before the rows carried their sample's identity.
SUCCEEDED = (
    "s.collection_state = 'completed' AND s.analysis_state = 'accepted' AND s.validity = 'valid'"
)
LATEST = (
    "c.collection_state = 'completed' AND NOT EXISTS (SELECT 1 FROM evidence_capture c2 "
    "WHERE c2.sample_id = c.sample_id AND c2.collection_state = 'completed' "
    "AND c2.revision > c.revision)"
)
JOINED_MENTIONS = (
    "SELECT s.question_revision_id, m.entity, COUNT(*) FILTER (WHERE m.mentioned) "
    "FROM sampling_sample s JOIN evidence_capture c ON c.sample_id = s.id AND " + LATEST + " "
    "JOIN analysis_mention m ON m.capture_id = c.id AND m.revision_id = %s "
    "WHERE s.run_id = %s AND " + SUCCEEDED + " GROUP BY 1, 2"
)
JOINED_CITATIONS = (
    "SELECT s.platform, COUNT(*) FILTER (WHERE ci.role = 'cited'), "
    "COUNT(*) FILTER (WHERE ci.role = 'found') FROM sampling_sample s "
    "JOIN evidence_capture c ON c.sample_id = s.id AND " + LATEST + " "
    "JOIN evidence_citation ci ON ci.capture_id = c.id WHERE s.run_id = %s AND " + SUCCEEDED + " "
    "GROUP BY 1"
)


def _rows(sql: str, params: list[object]) -> list[tuple[object, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def test_rows_carry_their_samples_identity(simulator: SimulatorHandle) -> None:
    run = collected_run(questions=2, repeats=1)
    mentions = Mention.objects.filter(sample__run=run)
    citations = Citation.objects.filter(capture__sample__run=run)
    assert mentions.exists() and citations.exists()
    assert not mentions.exclude(
        platform=F("sample__platform"), question_revision=F("sample__question_revision")
    ).exists()
    assert not citations.exclude(
        sample=F("capture__sample"),
        run=F("capture__sample__run"),
        platform=F("capture__sample__platform"),
        question_revision=F("capture__sample__question_revision"),
    ).exists()
    captures = Capture.objects.filter(sample__run=run)
    assert not captures.exclude(run=F("sample__run")).exists()
    assert not captures.filter(supersedes__isnull=False).exists()  # one capture per sample


def test_competitor_rows_carry_the_brands_result_in_the_same_answer(
    simulator: SimulatorHandle,
) -> None:
    run = collected_run(questions=3, repeats=2)
    mentions = Mention.objects.filter(sample__run=run)
    brand = {(m.revision_id, m.sample_id): m for m in mentions.filter(is_brand=True)}
    competitors = list(mentions.filter(is_brand=False))
    assert brand and competitors
    assert {(m.brand_mentioned, m.brand_rank) for m in brand.values()} == {(None, None)}
    for row in competitors:
        own = brand[(row.revision_id, row.sample_id)]
        assert (row.brand_mentioned, row.brand_rank) == (own.mentioned, own.rank), row.entity
    # Both sides occur, so the copy is not a constant.
    assert {row.brand_mentioned for row in competitors} == {True, False}


def _repair(sample: Sample, text: str) -> Capture:
    """A newer completed capture of the sample with this answer, written as the pipeline
    writes one (evidence.services.record_capture): the columns it copies are under test."""
    return record_result(sample, result(text))


def test_a_repaired_capture_supersedes_and_the_report_counts_as_the_joins_did(
    simulator: SimulatorHandle,
) -> None:
    run = collected_run(questions=2, repeats=2)
    succeeded = Sample.objects.filter(
        run=run, collection_state="completed", analysis_state="accepted", validity="valid"
    ).order_by("id")
    first, second = list(succeeded[:2])
    old = first.captures.get(collection_state="completed")
    assert Citation.objects.filter(capture=old).exists(), "the old capture's citations drop out"
    repaired = _repair(first, "Globex is the one I would pick.")
    not_an_answer = result("")
    not_an_answer.fail({"class": "transient", "message": "upstream unavailable"})
    failed = record_result(second, not_an_answer)
    assert (repaired.supersedes_id, failed.supersedes_id) == (old.pk, None)
    assert repaired.run_id == run.pk

    revision = start_reanalysis(run_id=run.pk)
    reanalyse_samples(
        revision_id=revision.pk,
        sample_ids=list(Sample.objects.filter(run=run).values_list("id", flat=True)),
    )
    report = build_run_report(run_id=run.pk, with_trend=False)
    assert report.revision["number"] == revision.number

    joined = Counter[tuple[object, object]]()
    for question, entity, n in _rows(JOINED_MENTIONS, [revision.pk, run_param(run.pk)]):
        joined[(str(question), entity)] += int(n)  # type: ignore[call-overload]
    reported = Counter[tuple[object, object]]()
    for metrics in report.by_question:
        for entity, rate in metrics.entity_mention_rates.items():
            if rate.successes:
                reported[(metrics.key, entity)] += rate.successes
    assert reported == +joined
    joined_rows = _rows(JOINED_CITATIONS, [run_param(run.pk)])
    citations = {p: cited for p, cited, _found in joined_rows}
    found = {p: n for p, _cited, n in joined_rows}
    # Only cited sources are citations; those found but not cited are their own figure.
    assert {m.key: m.citation_share.n for m in report.by_platform} == {
        p: citations.get(p, 0) for p in {m.key for m in report.by_platform}
    }
    assert {m.key: m.found_not_cited for m in report.by_platform} == {
        p: found.get(p, 0) for p in {m.key for m in report.by_platform}
    }
    assert any(found.values()), "the simulated engines found sources they did not cite"


def test_a_run_s_report_ignores_other_runs_rows(simulator: SimulatorHandle) -> None:
    one = collected_run(questions=1, repeats=2, name="one")
    alone = build_run_report(run_id=one.pk, with_trend=False).overall.as_dict()
    collected_run(questions=1, repeats=2, name="other")
    again = build_run_report(run_id=one.pk, with_trend=False).overall.as_dict()
    assert again == alone


def _report_queries(run_id: object) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        build_run_report(run_id=run_id, with_trend=False)  # type: ignore[arg-type]
    return [q["sql"] for q in captured.captured_queries]


def test_the_report_s_queries_do_not_grow_with_samples_nor_join_rows_to_samples(
    simulator: SimulatorHandle,
) -> None:
    small = _report_queries(collected_run(questions=1, repeats=1, name="small").pk)
    large = _report_queries(collected_run(questions=4, repeats=3, name="large").pk)
    assert len(large) == len(small)
    for sql in large:
        if "analysis_mention" in sql or "evidence_citation" in sql:
            assert "JOIN sampling_sample" not in sql and "JOIN evidence_capture" not in sql, sql


def test_rows_of_a_sample_no_longer_succeeded_drop_out_of_every_count(
    simulator: SimulatorHandle,
) -> None:
    run = collected_run(questions=2, repeats=2)
    succeeded = Sample.objects.filter(
        run=run, collection_state="completed", analysis_state="accepted", validity="valid"
    ).order_by("id")
    with_rows = [s for s in succeeded if Mention.objects.filter(sample=s, mentioned=True).exists()]
    sent_back = next(s for s in with_rows if Citation.objects.filter(sample=s).exists())
    # An analyst sends an answer back for review: its mention and citation rows stay stored.
    Sample.objects.filter(pk=sent_back.pk).update(analysis_state="review")
    repaired = _repair(next(s for s in succeeded if s.pk != sent_back.pk), "Initech, then Acme.")
    revision = start_reanalysis(run_id=run.pk)
    reanalyse_samples(
        revision_id=revision.pk,
        sample_ids=list(Sample.objects.filter(run=run).values_list("id", flat=True)),
    )
    assert Mention.objects.filter(sample=sent_back, revision=revision).exists()
    assert Mention.objects.filter(capture=repaired, revision=revision).exists()

    report = build_run_report(run_id=run.pk, with_trend=False)

    assert report.overall.counts.review == 1
    joined = Counter[tuple[object, object]]()
    for question, entity, n in _rows(JOINED_MENTIONS, [revision.pk, run_param(run.pk)]):
        joined[(str(question), entity)] += int(n)  # type: ignore[call-overload]
    reported = Counter[tuple[object, object]]()
    for metrics in report.by_question:
        for entity, rate in metrics.entity_mention_rates.items():
            reported[(metrics.key, entity)] += rate.successes
    assert +reported == +joined
    joined_rows = _rows(JOINED_CITATIONS, [run_param(run.pk)])
    citations = {p: cited for p, cited, _found in joined_rows}
    found = {p: n for p, _cited, n in joined_rows}
    # Only cited sources are citations; those found but not cited are their own figure.
    assert {m.key: m.citation_share.n for m in report.by_platform} == {
        p: citations.get(p, 0) for p in {m.key for m in report.by_platform}
    }
    assert {m.key: m.found_not_cited for m in report.by_platform} == {
        p: found.get(p, 0) for p in {m.key for m in report.by_platform}
    }
    assert any(found.values()), "the simulated engines found sources they did not cite"
    counted = Mention.objects.filter(
        revision=revision, sample__in=succeeded.exclude(pk=sent_back.pk), mentioned=True
    )
    assert {s.entity: s.mentioned for s in report.sentiment} == {
        e: counted.filter(entity=e).count() for e in report.entities
    }
    answers = Mention.objects.filter(
        revision=revision, sample__in=succeeded.exclude(pk=sent_back.pk), is_brand=False
    )
    assert sum(h.answers for h in report.head_to_head) == answers.count()
