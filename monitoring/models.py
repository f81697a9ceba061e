"""The metrics series: one row of counts per run x target x entity x scope (docs/decisions.md,
"The metrics series: counts per run, target, scope and entity").

Grain: a run's target (platform, region, device, mode) and entity (the brand or a
competitor), in one of three scopes:

* all of the run's questions: `topic` "" and `question` NULL;
* one topic (a tag of the campaign's questions, frozen with the run): `topic` set, `question`
  NULL; a question with several topics counts in each of them;
* one question: `topic` "" and `question` set (the question, whichever revision the run
  asked).

The rows hold counts, never rates: every figure is a ratio of sums of them, with its Wilson
interval (monitoring.selectors). They are written by monitoring.services from the report's
own SQL pass (analysis.report_scan, per target and question revision) and rewritten for each
new analysis revision; `comparability_key` says what the row measures (ComparabilityKey).
"""

from __future__ import annotations

from django.db import models

TENANT = "tenancy.Tenant"
COUNTS = (
    "planned",
    "valid",
    "failed",
    "evidence_missing",
    "mentioned",
    "recommended",
    "rated",
    "first_position",
    "ranked",
    "position_sum",
    "positive",
    "negative",
    "citations",
    "own_citations",
)


class SeriesRow(models.Model):
    """Counts of one run x target x entity x scope (see the module's docstring)."""

    tenant = models.ForeignKey(TENANT, on_delete=models.CASCADE, related_name="+")
    campaign = models.ForeignKey("sampling.Campaign", on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey("sampling.Run", on_delete=models.CASCADE, related_name="+")
    at = models.DateTimeField()  # the run's finish time: what a chart puts on its x axis
    day = models.DateField()  # `at`'s date in UTC
    platform = models.CharField(max_length=32)
    region = models.CharField(max_length=16)
    device = models.CharField(max_length=32)
    mode = models.CharField(max_length=32)
    topic = models.CharField(max_length=100, blank=True, default="")  # "": not a topic row
    question = models.ForeignKey(
        "sampling.Question", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )  # NULL: not a per-question row
    entity = models.CharField(max_length=200)
    is_brand = models.BooleanField()
    analysis_revision = models.PositiveIntegerField()  # its number; 0: none yet
    comparability_key = models.CharField(max_length=64)
    # planned samples of the cell, and of them: succeeded (valid: answered, valid, analysed),
    # failed (cancelled included) and those whose evidence is missing
    planned = models.PositiveIntegerField(default=0)
    valid = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    evidence_missing = models.PositiveIntegerField(default=0)
    # succeeded samples whose analysed capture mentions the entity (the report's mention rate
    # numerator), those of them with a rank, rank 1, and the sum of the ranks
    mentioned = models.PositiveIntegerField(default=0)
    ranked = models.PositiveIntegerField(default=0)
    first_position = models.PositiveIntegerField(default=0)
    position_sum = models.PositiveIntegerField(default=0)
    # the entity's mentioned rows of the succeeded samples (every capture's, as the report's
    # sentiment and recommendation rates count them) and of them: recommending, by sentiment
    rated = models.PositiveIntegerField(default=0)
    recommended = models.PositiveIntegerField(default=0)
    positive = models.PositiveIntegerField(default=0)
    negative = models.PositiveIntegerField(default=0)
    # citations of the cell's analysed captures, and those to the entity's own domains
    citations = models.PositiveIntegerField(default=0)
    own_citations = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "platform", "region", "device", "mode", "entity", "topic"],
                condition=models.Q(question__isnull=True),
                name="series_row_unique_scope",
            ),
            models.UniqueConstraint(
                fields=["run", "platform", "region", "device", "mode", "entity", "question"],
                condition=models.Q(question__isnull=False),
                name="series_row_unique_question",
            ),
        ]
        indexes = [
            # The scopes of all questions and of each topic: a run has a row per question for
            # each of these, so the per-question rows stay out of this index.
            models.Index(
                fields=["campaign", "entity", "topic", "platform", "at"],
                name="series_row_scope_idx",
                condition=models.Q(question__isnull=True),
            ),
            models.Index(
                fields=["campaign", "question", "entity", "platform", "at"],
                name="series_row_question_idx",
                condition=models.Q(question__isnull=False),
            ),
            models.Index(fields=["tenant", "day"], name="series_row_tenant_day_idx"),
            # The dashboard's one read (console/dashboard.py): a scope's rows (all questions or
            # a topic) of the campaign's entities over a range, by an index-only scan. The
            # per-question rows share topic "" with the all-questions rows, so without the
            # condition a read of the campaign's scope walks every per-question row's heap page.
            models.Index(
                fields=["campaign", "topic", "entity", "at"],
                include=[
                    "run",
                    "platform",
                    "region",
                    "device",
                    "mode",
                    "comparability_key",
                    "valid",
                    "mentioned",
                    "ranked",
                    "position_sum",
                    "rated",
                    "positive",
                    "negative",
                    "citations",
                    "own_citations",
                ],
                condition=models.Q(question__isnull=True),
                name="series_row_scope_read_idx",
            ),
            # The series endpoint's default read (monitoring.selectors.series): the brand's
            # rows of a scope, by `is_brand` whatever the brand was called then; without it
            # PostgreSQL walks every all-questions row of the table and filters.
            models.Index(
                fields=["campaign", "topic", "at"],
                condition=models.Q(question__isnull=True, is_brand=True),
                name="series_row_brand_scope_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.run_id} {self.platform} {self.entity} {self.topic or self.question_id}"


class ComparabilityKey(models.Model):
    """What a series row measures, whose digest is its `comparability_key`: the target, the
    model the run froze for its platform, the analyser and its version, the question
    revisions of the row's scope. Two rows with the same key measured the same thing; a
    series breaks into segments where the key changes, and the parts say what changed."""

    digest = models.CharField(max_length=64, unique=True)
    parts = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.digest[:12]
