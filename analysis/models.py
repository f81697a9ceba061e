"""Brand analysis of one capture: which entity was mentioned, how often, and first where."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now


class Mention(models.Model):
    sample = models.ForeignKey("sampling.Sample", on_delete=models.CASCADE, related_name="mentions")
    capture = models.ForeignKey(
        "evidence.Capture", on_delete=models.CASCADE, related_name="mentions"
    )
    entity = models.CharField(max_length=200)
    is_brand = models.BooleanField(default=False)
    mentioned = models.BooleanField()
    count = models.PositiveIntegerField(default=0)
    first_position = models.PositiveIntegerField(null=True, blank=True)
    rank = models.PositiveSmallIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["capture", "entity"], name="mention_unique_entity")
        ]

    def __str__(self) -> str:
        return f"{self.entity}: {'yes' if self.mentioned else 'no'}"
