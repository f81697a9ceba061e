"""The pipeline's analysis of one sample (revision 1): context stored, unsure answers to
review with reason and sentence, repeated analysis replacing its own rows."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction
from django.db.models.functions import Now

from analysis.models import AmbiguousWord, AnalysisResult, AnalysisRevision, Mention
from analysis.selectors import ambiguity_warnings, analysis_review_note
from analysis.services import analyse_sample
from console.admin.analysis import highlighted_sentence
from evidence.models import Capture
from sampling.models import Run, Sample
from tests.factories import capture_row
from tests.reports.conftest import collected_run

pytestmark = pytest.mark.django_db
TARGET = [{"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"}]


APPLE = {"name": "Apple", "aliases": ["苹果"], "domains": ["apple.com"]}


def _launched() -> Run:
    """A launched run of one sample, not executed; its campaign has the competitor Apple."""
    return collected_run(
        questions=1, repeats=1, targets=TARGET, drive=False, more_competitors=[APPLE]
    )


def _answered(text: str) -> tuple[Sample, Capture]:
    sample = Sample.objects.get(run=_launched())
    capture = capture_row(
        sample=sample, revision=1, collection_state="completed", answer_text=text, captured_at=Now()
    )
    return sample, capture


def _apply(sample_id: int) -> Any:
    verdict = analyse_sample(sample_id=sample_id)
    with transaction.atomic():
        sample = Sample.objects.select_for_update().get(pk=sample_id)
        verdict.apply(sample)
        sample.save()
    return verdict


def test_an_unsure_answer_goes_to_review_with_reason_and_highlighted_sentence() -> None:
    sample, _capture = _answered(
        "Here is my short answer to the question you asked today. 我选苹果。"
    )

    verdict = _apply(sample.pk)

    sample.refresh_from_db()
    assert verdict.ambiguous and sample.analysis_state == "review"
    result = AnalysisResult.objects.get(sample=sample)
    assert result.review_reason.startswith("Apple: '苹果' is an ambiguous word")
    assert result.review_sentence == "我选苹果。"
    assert (result.analyser, result.revision.number) == ("rules", 1)
    assert str(highlighted_sentence(result)) == "我选<mark>苹果</mark>。"
    assert analysis_review_note(sample_id=sample.pk) == (
        "Apple: '苹果' is an ambiguous word (no context cues) — «我选苹果。»"
    )


def test_the_issue_sentence_is_stored_as_absence_and_accepted() -> None:
    sample, capture = _answered("I couldn't find any reliable information about Acme.")

    _apply(sample.pk)

    sample.refresh_from_db()
    assert sample.analysis_state == "accepted"
    acme = Mention.objects.get(sample=sample, entity="Acme")
    assert (acme.context, acme.mentioned, acme.rank, acme.matched) == ("absence", False, None, 1)
    assert (acme.capture_id, acme.analyser) == (capture.pk, "rules")
    assert acme.sentence == "I couldn't find any reliable information about Acme."


def test_a_repeated_analysis_in_the_same_revision_replaces_its_rows() -> None:
    sample, _capture = _answered("Acme is the best CRM.")
    first = analyse_sample(sample_id=sample.pk)
    with transaction.atomic():
        first.apply(Sample.objects.get(pk=sample.pk))
    again = analyse_sample(sample_id=sample.pk)
    with transaction.atomic():
        again.apply(Sample.objects.get(pk=sample.pk))

    assert AnalysisRevision.objects.filter(run=sample.run).count() == 1
    assert Mention.objects.filter(sample=sample, entity="Acme").count() == 1
    assert AnalysisResult.objects.filter(sample=sample).count() == 1


def test_marks_silence_the_warning_and_are_frozen_into_the_revision_at_first_analysis() -> None:
    run = _launched()
    campaign = run.campaign
    warned = [w.split(" is a common word")[0] for w in ambiguity_warnings(campaign=campaign)]
    assert warned == ["Alias '环球' of Globex", "Alias 'Apple' of Apple", "Alias '苹果' of Apple"]
    AmbiguousWord.objects.create(campaign=campaign, entity="Apple", word="苹果")
    AmbiguousWord.objects.create(campaign=campaign, entity="Apple", word="apple")
    warned = [w.split(" is a common word")[0] for w in ambiguity_warnings(campaign=campaign)]
    assert warned == ["Alias '环球' of Globex"]

    sample = Sample.objects.get(run=run)
    capture_row(
        sample=sample, revision=1, collection_state="completed", answer_text="x", captured_at=Now()
    )
    analyse_sample(sample_id=sample.pk)
    revision = AnalysisRevision.objects.get(run=run, number=1)
    assert revision.ambiguous_words == {"Apple": ["apple", "苹果"]}


# --- the store's statements: one INSERT each for a first analysis, rows as the ORM writes ---


def _row(obj: Any) -> dict[str, Any]:
    return {f.attname: getattr(obj, f.attname) for f in type(obj)._meta.concrete_fields}


def test_a_first_store_writes_the_rows_the_orm_would_and_fills_their_keys() -> None:
    sample, _capture = _answered("I recommend Acme over Globex; Apple is a phone company.")
    verdict = analyse_sample(sample_id=sample.pk)
    assert verdict.result is not None and len(verdict.mentions) == 4
    with transaction.atomic():
        verdict.apply(Sample.objects.get(pk=sample.pk))

    stored = AnalysisResult.objects.get(sample=sample)
    assert _row(stored) == _row(verdict.result)  # pk and created_at from the database too
    rows = {m.entity: _row(m) for m in Mention.objects.filter(sample=sample)}
    assert rows == {m.entity: _row(m) for m in verdict.mentions}
    assert rows["Acme"]["occurrences"] == [{"start": 12, "end": 16, "context": "recommended"}]
    assert rows["Globex"]["brand_rank"] == 1 and rows["Acme"]["brand_rank"] is None
    assert all(not m._state.adding for m in (verdict.result, *verdict.mentions))


def test_a_duplicate_store_keeps_the_rows_and_a_changed_one_replaces_them() -> None:
    sample, capture = _answered("Acme is the best CRM.")
    first = analyse_sample(sample_id=sample.pk)
    with transaction.atomic():
        first.apply(Sample.objects.get(pk=sample.pk))
    kept = (AnalysisResult.objects.get(sample=sample).pk, Mention.objects.get(entity="Acme").pk)

    again = analyse_sample(sample_id=sample.pk)  # the same analysis: nothing written
    with transaction.atomic():
        again.apply(Sample.objects.get(pk=sample.pk))
    assert (
        AnalysisResult.objects.get(sample=sample).pk,
        Mention.objects.get(entity="Acme").pk,
    ) == kept

    Capture.objects.filter(pk=capture.pk).update(answer_text="Avoid Acme, it is slow.")
    changed = analyse_sample(sample_id=sample.pk)
    with transaction.atomic():
        changed.apply(Sample.objects.get(pk=sample.pk))
    acme = Mention.objects.get(sample=sample, entity="Acme")
    assert acme.pk != kept[1] and acme.context == "negative"
    assert AnalysisResult.objects.filter(sample=sample).count() == 1
