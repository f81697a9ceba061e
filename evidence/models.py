"""Archived evidence. Objects live in storage under `tenant/run/sample/revision/kind`; rows
hold what is needed to verify them (sha256, size, MIME). Rows are never rewritten: a repair
adds a revision."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from sampling.models import Sample, copied_key


class EvidenceKind(models.TextChoices):
    RAW = "raw", "Raw response as received"
    TEXT = "text", "Answer text"
    CITATIONS = "citations", "Citations (JSON)"
    SCREENSHOT = "screenshot", "Screenshot"
    THUMBNAIL = "thumbnail", "Thumbnail"


class Capture(models.Model):
    """One revision of what was collected for a sample: the answer and its context."""

    sample = models.ForeignKey("sampling.Sample", on_delete=models.CASCADE, related_name="captures")
    revision = models.PositiveIntegerField()
    attempt_no = models.PositiveIntegerField(null=True, blank=True)
    # The lease token the capture was written under (None: written outside a lease, e.g. a
    # re-parse). check_invariants compares it with refused stale writes.
    fencing_token = models.BigIntegerField(null=True, blank=True)
    upstream_id = models.CharField(max_length=200, blank=True, default="")
    collection_state = models.CharField(max_length=16)
    answer_text = models.TextField(blank=True, default="")
    warnings = models.JSONField(default=list, blank=True)
    error = models.JSONField(null=True, blank=True)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    upstream_cost = models.BigIntegerField(null=True, blank=True)
    upstream_cost_currency = models.CharField(max_length=3, blank=True, default="")
    # When the answer was received (the answer inbox's time) or recorded: database time,
    # never a worker's clock. The upstream's own timestamps stay in the raw, as reported.
    captured_at = models.DateTimeField(db_default=Now())
    created_at = models.DateTimeField(db_default=Now())
    # Written once with the row by evidence.services.record_capture (docs/decisions.md, "The
    # report reads mentions and citations per run"): the sample's run, and for a completed
    # capture the sample's latest completed capture before it, which this one replaces as the
    # analysed capture.
    run = copied_key("sampling.Run")
    supersedes = copied_key("self", null=True)

    class Meta:
        ordering = ["sample", "revision"]
        constraints = [
            models.UniqueConstraint(fields=["sample", "revision"], name="capture_unique_revision")
        ]
        indexes = [
            # The report's analysed captures: all of a run's completed captures but these.
            models.Index(
                fields=["run", "supersedes"],
                name="capture_run_superseded_idx",
                condition=Q(supersedes__isnull=False),
            ),
            models.Index(
                fields=["run", "id"],
                name="capture_run_incomplete_idx",
                condition=~Q(collection_state="completed"),
            ),
        ]

    def __str__(self) -> str:
        return f"capture r{self.revision} of sample {self.sample_id}"


class EvidenceObject(models.Model):
    capture = models.ForeignKey(Capture, on_delete=models.CASCADE, related_name="evidence_objects")
    kind = models.CharField(max_length=16, choices=EvidenceKind.choices)
    key = models.CharField(max_length=500, unique=True)
    sha256 = models.CharField(max_length=64)
    size = models.PositiveBigIntegerField()
    mime = models.CharField(max_length=100)
    # The capture's revision, repeated here so a row alone says which revision it belongs to
    # (the key carries it too: tenant/run/sample/revision/kind).
    revision = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["capture", "kind"], name="evidence_one_kind_per_capture"
            )
        ]

    def __str__(self) -> str:
        return self.key


class CitationRole(models.TextChoices):
    """Where the protocol tells them apart: a source the answer cites, or one the engine
    found (a search result, a grounding chunk) that no part of the answer cites."""

    CITED = "cited", "Cited in the answer"
    FOUND = "found", "Found, not cited"


class Citation(models.Model):
    capture = models.ForeignKey(Capture, on_delete=models.CASCADE, related_name="citations")
    position = models.PositiveIntegerField()
    # Rows written before the role was recorded are all cited sources.
    role = models.CharField(
        max_length=8, choices=CitationRole.choices, default=CitationRole.CITED,
        db_default=CitationRole.CITED.value,
    )  # fmt: skip
    url = models.TextField()
    normalized_url = models.TextField()
    domain = models.CharField(max_length=255, blank=True, default="")
    title = models.TextField(blank=True, default="")
    start = models.PositiveIntegerField(null=True, blank=True)
    end = models.PositiveIntegerField(null=True, blank=True)
    # The capture's sample and what the report groups by, copied once with the row by
    # evidence.services.record_capture (the sample's identity never changes): the report reads
    # a run's citations without a join.
    run = copied_key("sampling.Run")
    sample = copied_key("sampling.Sample")
    platform = models.CharField(max_length=32)
    question_revision = copied_key("sampling.QuestionRevision")

    class Meta:
        ordering = ["capture", "position"]
        indexes = [models.Index(fields=["run"], name="citation_run_idx")]

    def __str__(self) -> str:
        return self.normalized_url


class SearchQuery(models.Model):
    """One web search the engine said it ran for the answer of a capture (query fan-out),
    in the order the protocol gave them."""

    capture = models.ForeignKey(Capture, on_delete=models.CASCADE, related_name="search_queries")
    position = models.PositiveIntegerField()
    query = models.TextField()
    # Copied once with the row by evidence.services.record_capture, as for Citation.
    run = copied_key("sampling.Run")
    sample = copied_key("sampling.Sample")
    platform = models.CharField(max_length=32)
    question_revision = copied_key("sampling.QuestionRevision")

    class Meta:
        ordering = ["capture", "position"]
        indexes = [models.Index(fields=["run"], name="searchquery_run_idx")]

    def __str__(self) -> str:
        return self.query


class DomainCategoryChoice(models.TextChoices):
    """What a tenant may say a domain is (own and competitor come from the campaign)."""

    EDITORIAL = "editorial", "Editorial"
    USER_GENERATED = "user-generated", "User-generated"
    REVIEWS = "reviews", "Reviews"
    REFERENCE = "reference", "Reference"
    SOCIAL = "social", "Social"
    VIDEO = "video", "Video"
    COMMERCE = "commerce", "Commerce"
    INSTITUTIONAL = "institutional", "Institutional"


class DomainCategory(models.Model):
    """A tenant's own category for a cited registrable domain, over the shipped
    classification (evidence/categories.py)."""

    tenant = models.ForeignKey("tenancy.Tenant", on_delete=models.CASCADE, related_name="+")
    domain = models.CharField(
        max_length=253, help_text="Registrable domain, e.g. example.co.uk (no scheme, no www)."
    )
    category = models.CharField(max_length=16, choices=DomainCategoryChoice.choices)
    note = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["tenant", "domain"]
        verbose_name = "domain category override"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "domain"], name="domaincategory_unique")
        ]

    def __str__(self) -> str:
        return f"{self.domain}: {self.category}"


class ReviewDecisionKind(models.TextChoices):
    ACCEPTED = "accepted", "Accepted (analysis usable)"
    REJECTED = "rejected", "Rejected (analysis not usable)"
    ACKNOWLEDGED = "acknowledged", "Partial evidence acknowledged"


class ReviewDecision(models.Model):
    """An analyst's decision on a sample in the review queue. Append-only history; the
    sample's analysis layer changes only through its state machine."""

    sample = models.ForeignKey(
        "sampling.Sample", on_delete=models.CASCADE, related_name="review_decisions"
    )
    capture = models.ForeignKey(
        Capture, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    decision = models.CharField(max_length=16, choices=ReviewDecisionKind.choices)
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    note = models.TextField(blank=True, default="")
    analysis_state_before = models.CharField(max_length=16)
    analysis_state_after = models.CharField(max_length=16)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.decision} sample {self.sample_id}"


class ReviewSample(Sample):
    """The analyst's review queue in the console: samples with partial evidence or with
    analysis in review (a proxy; the rows are `sampling.Sample`)."""

    class Meta:
        proxy = True
        verbose_name = "review queue item"
        verbose_name_plural = "review queue"
