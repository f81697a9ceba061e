"""Brand analysis of captures, in revisions.

A run's first analysis (the pipeline's, one sample at a time) is revision 1; `reanalyse`
adds revision 2, 3, ... from the stored answers, never touching an earlier one. Every result
row names the analyser and its version.
"""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now

from sampling.models import copied_key


class RevisionState(models.TextChoices):
    PIPELINE = "pipeline", "Pipeline (grows with the run)"
    RUNNING = "running", "Re-analysis running"
    DONE = "done", "Re-analysis done"


class AnalysisRevision(models.Model):
    run = models.ForeignKey(
        "sampling.Run", on_delete=models.CASCADE, related_name="analysis_revisions"
    )
    number = models.PositiveIntegerField()
    analyser = models.CharField(max_length=64)
    analyser_version = models.CharField(max_length=64)
    source = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    # Frozen at creation: entity name -> aliases the campaign marked as everyday words.
    ambiguous_words = models.JSONField(default=dict, blank=True)
    state = models.CharField(
        max_length=16, choices=RevisionState.choices, default=RevisionState.RUNNING
    )
    expected = models.PositiveIntegerField(default=0)  # samples to analyse (reanalysis)
    created_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "number"], name="analysis_revision_unique")
        ]

    def __str__(self) -> str:
        return f"run {str(self.run_id)[:8]} analysis r{self.number} ({self.analyser})"


class AnalysisResult(models.Model):
    """One sample's analysis in one revision: which capture, validity, why review."""

    revision = models.ForeignKey(AnalysisRevision, on_delete=models.CASCADE, related_name="results")
    sample = models.ForeignKey(
        "sampling.Sample", on_delete=models.CASCADE, related_name="analysis_results"
    )
    capture = models.ForeignKey(
        "evidence.Capture", on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    analyser = models.CharField(max_length=64)
    analyser_version = models.CharField(max_length=64)
    valid = models.BooleanField()
    validity_reason = models.CharField(max_length=64, blank=True, default="")
    review_reason = models.TextField(blank=True, default="")
    review_sentence = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["revision", "sample"], name="analysis_result_unique")
        ]

    def __str__(self) -> str:
        return f"sample {self.sample_id} in revision {self.revision_id}"


class Mention(models.Model):
    sample = models.ForeignKey("sampling.Sample", on_delete=models.CASCADE, related_name="mentions")
    capture = models.ForeignKey(
        "evidence.Capture", on_delete=models.CASCADE, related_name="mentions"
    )
    revision = models.ForeignKey(
        AnalysisRevision, on_delete=models.CASCADE, related_name="mentions"
    )
    entity = models.CharField(max_length=200)
    is_brand = models.BooleanField(default=False)
    # Counts as a mention in rates: a literal match whose context is not absence/other_sense.
    mentioned = models.BooleanField()
    count = models.PositiveIntegerField(default=0)  # counted occurrences
    matched = models.PositiveIntegerField(default=0)  # literal alias matches
    first_position = models.PositiveIntegerField(null=True, blank=True)
    rank = models.PositiveSmallIntegerField(null=True, blank=True)
    context = models.CharField(max_length=16, blank=True, default="")
    sentiment = models.CharField(max_length=8, default="neutral")
    recommended = models.BooleanField(default=False)
    sentence = models.TextField(blank=True, default="")
    occurrences = models.JSONField(default=list, blank=True)
    unsure = models.TextField(blank=True, default="")
    analyser = models.CharField(max_length=64, default="")
    analyser_version = models.CharField(max_length=64, default="")
    created_at = models.DateTimeField(db_default=Now())
    # What the report groups by, copied from the sample with the row (a sample's identity
    # never changes): the report reads a revision's mentions without joining the samples.
    # analysis.services.derive, the one writer, sets them; a row made elsewhere (a test) sets
    # them itself.
    platform = models.CharField(max_length=32)
    question_revision = copied_key("sampling.QuestionRevision")
    # On a competitor's row, the brand's result in the same answer (analysis.services.derive
    # writes a capture's rows together; NULL on the brand's own row): the report's
    # head-to-head reads one row instead of joining each competitor row to the brand's.
    brand_mentioned = models.BooleanField(null=True, blank=True)
    brand_rank = models.PositiveSmallIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["revision", "capture", "entity"], name="mention_unique_entity_revision"
            )
        ]

    def __str__(self) -> str:
        return f"{self.entity}: {self.context or 'not found'}"


class AmbiguousWord(models.Model):
    """An alias the campaign marks as an everyday word: it counts only in its brand sense."""

    campaign = models.ForeignKey(
        "sampling.Campaign", on_delete=models.CASCADE, related_name="ambiguous_words"
    )
    entity = models.CharField(max_length=200)
    word = models.CharField(max_length=200)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["campaign", "entity", "word"], name="ambiguous_word_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.entity}: {self.word}"
