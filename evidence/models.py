"""Archived evidence. Objects live in storage under `tenant/run/sample/revision/kind`; rows
hold what is needed to verify them (sha256, size, MIME). Rows are never rewritten: a repair
adds a revision."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now


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
    upstream_id = models.CharField(max_length=200, blank=True, default="")
    collection_state = models.CharField(max_length=16)
    answer_text = models.TextField(blank=True, default="")
    warnings = models.JSONField(default=list, blank=True)
    error = models.JSONField(null=True, blank=True)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    upstream_cost = models.BigIntegerField(null=True, blank=True)
    upstream_cost_currency = models.CharField(max_length=3, blank=True, default="")
    captured_at = models.DateTimeField()
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["sample", "revision"]
        constraints = [
            models.UniqueConstraint(fields=["sample", "revision"], name="capture_unique_revision")
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
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["capture", "kind"], name="evidence_one_kind_per_capture"
            )
        ]

    def __str__(self) -> str:
        return self.key


class Citation(models.Model):
    capture = models.ForeignKey(Capture, on_delete=models.CASCADE, related_name="citations")
    position = models.PositiveIntegerField()
    url = models.TextField()
    normalized_url = models.TextField()
    domain = models.CharField(max_length=255, blank=True, default="")
    title = models.TextField(blank=True, default="")
    start = models.PositiveIntegerField(null=True, blank=True)
    end = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["capture", "position"]

    def __str__(self) -> str:
        return self.normalized_url
