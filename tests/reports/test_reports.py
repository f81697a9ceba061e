"""Run reports: denominators, conservation, the double count, and refusal when they disagree."""

from __future__ import annotations

from typing import Any

import pytest

from analysis.models import Mention
from analysis.reports import ReportIntegrityError, build_run_report
from analysis.stats import rate
from evidence.models import Citation
from sampling.models import Run, Sample
from sampling.selectors import Status
from simulator import SimulatorHandle
from tests.reports.conftest import collected_run

pytestmark = pytest.mark.django_db


def _brand_mentioned_by_hand(run: Run) -> int:
    """Succeeded samples whose latest completed capture mentions the brand, counted directly."""
    n = 0
    for sample in Sample.objects.filter(run=run, validity="valid", analysis_state="accepted"):
        capture = sample.captures.filter(collection_state="completed").order_by("-revision")[0]
        n += Mention.objects.filter(capture=capture, entity="Acme", mentioned=True).count()
    return n


def test_report_keeps_failed_placeholders_in_the_denominator(simulator: SimulatorHandle) -> None:
    # Question 1 always fails on perplexity (auth error: no retry): 2 failure placeholders.
    simulator.script(
        {"match": "number 1:", "fault": "auth_error", "platform": "perplexity", "times": None}
    )
    run = collected_run()  # 3 questions x 2 platforms x 2 repeats = 12 planned

    report = build_run_report(run_id=run.pk)

    counts = report.overall.counts
    assert counts.planned == 12
    assert counts.failed == 2
    assert counts.succeeded + counts.failed + counts.invalid + counts.review + counts.pending == 12
    assert report.overall.mention_rate == rate(_brand_mentioned_by_hand(run), 12)
    perplexity = next(m for m in report.by_platform if m.key == "perplexity")
    assert perplexity.counts.planned == 6 and perplexity.counts.failed == 2
    assert perplexity.mention_rate.n == 6  # failures stay in the denominator
    assert [m.counts.planned for m in report.by_question] == [4, 4, 4]
    assert sum(m.counts.failed for m in report.by_question) == 2
    names = [c.name for c in report.checks]
    assert names == ["conservation", "double count", "second count"]
    assert "review 0" in report.checks[0].detail


def test_report_metrics_match_the_records(simulator: SimulatorHandle) -> None:
    run = collected_run(questions=2, repeats=2)
    report = build_run_report(run_id=run.pk)
    overall = report.overall

    succeeded = Sample.objects.filter(run=run, validity="valid", analysis_state="accepted")
    captures = [s.captures.order_by("-revision")[0] for s in succeeded]
    rows = Citation.objects.filter(capture__in=captures)
    # Only the answer's citations count as citations; what the search found is apart.
    urls = list(rows.filter(role="cited").values_list("normalized_url", flat=True))
    brand_urls = [u for u in urls if "acme.com/" in u]
    assert overall.citation_share == rate(len(brand_urls), len(urls))
    assert overall.found_not_cited == rows.filter(role="found").count()
    assert sum(n for _, n in overall.top_domains) <= len(urls)
    assert all("." in domain and "/" not in domain for domain, _ in overall.top_domains)
    assert "bbc.co.uk" in {d for d, _ in overall.top_domains} or not any(
        "bbc.co.uk" in u for u in urls
    )

    pairs = {
        e: Mention.objects.filter(capture__in=captures, entity=e, mentioned=True).count()
        for e in report.entities
    }
    total = sum(pairs.values())
    for entity in report.entities:
        assert overall.share_of_voice[entity] == rate(pairs[entity], total)
    ranks = list(
        Mention.objects.filter(capture__in=captures, entity="Acme", mentioned=True).values_list(
            "rank", flat=True
        )
    )
    assert overall.first_rank.n == len(ranks)
    if ranks:
        assert overall.first_rank.mean == pytest.approx(sum(ranks) / len(ranks))


def test_review_is_its_own_bucket_in_the_equation(simulator: SimulatorHandle) -> None:
    run = collected_run(questions=1, repeats=2)
    sample = Sample.objects.filter(run=run, validity="valid").order_by("id")[0]
    Sample.objects.filter(pk=sample.pk).update(analysis_state="review")

    report = build_run_report(run_id=run.pk)

    assert report.overall.counts.review == 1
    assert "review 1" in report.checks[0].detail
    assert report.overall.mention_rate.n == 4


def test_pending_samples_count_as_pending_not_as_not_mentioned(
    simulator: SimulatorHandle,
) -> None:
    run = collected_run(questions=1, repeats=1, drive=False)  # launched, nothing executed
    report = build_run_report(run_id=run.pk)
    assert report.overall.counts.pending == 2
    assert report.overall.mention_rate == rate(0, 2)
    assert report.outcome == "in_progress"


def test_a_corrupted_aggregate_is_refused_with_the_difference_named(
    simulator: SimulatorHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = collected_run(questions=1, repeats=2)
    build_run_report(run_id=run.pk)  # consistent: passes

    import analysis.reports as reports

    real = reports.run_status

    def corrupted(*, run_id: object) -> Status:
        status = real(run_id=run_id)  # type: ignore[arg-type]
        status.succeeded += 1  # a silent counting bug: a sample counted in no bucket
        return status

    monkeypatch.setattr(reports, "run_status", corrupted)
    with pytest.raises(ReportIntegrityError) as refused:
        build_run_report(run_id=run.pk)
    text = str(refused.value)
    succeeded = Sample.objects.filter(run=run, validity="valid", analysis_state="accepted").count()
    assert (
        f"run: succeeded by record scan = {succeeded}, by status aggregation = {succeeded + 1}"
        in text
    )
    assert "conservation broken" in text  # and the SQL side no longer adds up to planned


def test_a_lost_placeholder_breaks_conservation(simulator: SimulatorHandle) -> None:
    simulator.script(
        {"match": "number 0:", "fault": "auth_error", "platform": "openai", "times": None}
    )
    run = collected_run(questions=1, repeats=1)
    failed = Sample.objects.get(run=run, collection_state="failed")
    failed.delete()  # the failure "disappears" from the data

    with pytest.raises(ReportIntegrityError) as refused:
        build_run_report(run_id=run.pk)
    assert "record scan: 1 sample records, planned = 2" in refused.value.differences


def test_a_finished_sample_in_no_bucket_is_refused(simulator: SimulatorHandle) -> None:
    run = collected_run(questions=1, repeats=1)
    sample = Sample.objects.filter(run=run).order_by("id")[0]
    # Finished, answer completed, analysis never ran: fits no bucket.
    Sample.objects.filter(pk=sample.pk).update(
        collection_state="completed", analysis_state="pending", validity="", queue_state="done"
    )
    with pytest.raises(ReportIntegrityError) as refused:
        build_run_report(run_id=run.pk)
    text = str(refused.value)
    assert f"1 finished sample(s) in no bucket (ids {sample.pk})" in text
    assert "SQL aggregate (run_status): conservation broken" in text


def test_a_mention_count_disagreement_is_refused(
    simulator: SimulatorHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = collected_run(questions=1, repeats=2)
    import analysis.reports as reports

    def corrupted(sentiment: list[Any], brand: str) -> int:
        return 0  # the `c.get(target, 0)` bug: silently zero

    monkeypatch.setattr(reports, "_mentioned_by_mention_rows", corrupted)
    mentioned = _brand_mentioned_by_hand(run)
    assert mentioned > 0, "seeded answers must mention the brand for this check to mean anything"
    with pytest.raises(ReportIntegrityError) as refused:
        build_run_report(run_id=run.pk)
    assert (
        f"run: brand_mentioned by record scan = {mentioned}, by SQL aggregate = 0"
        in refused.value.differences
    )


def test_over_time_lists_the_campaigns_runs_oldest_first(simulator: SimulatorHandle) -> None:
    first = collected_run(questions=1, repeats=1, name="trend")
    from pipeline.launch import launch_run
    from tests.inprocess import drive_in_process

    second = launch_run(campaign=first.campaign)
    drive_in_process(second.pk)

    report = build_run_report(run_id=second.pk)
    assert [p.run_id for p in report.over_time] == [str(first.pk), str(second.pk)]
    earlier = build_run_report(run_id=first.pk)
    assert [p.run_id for p in earlier.over_time] == [str(first.pk)]
    assert all(p.counts.planned == 2 for p in report.over_time)
