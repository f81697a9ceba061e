"""Reads for analysis: per-platform mention rates over planned samples."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from django.db.models import Count, Exists, OuterRef, Q

from sampling.models import Sample
from sampling.selectors import FAILED, INVALID, REVIEW, SUCCEEDED, TERMINAL

from .models import Mention
from .stats import Rate, rate


@dataclass(frozen=True)
class PlatformMentions:
    platform: str
    planned: int
    succeeded: int
    failed: int
    invalid: int
    review: int
    pending: int
    mentioned: int
    mention_rate: Rate  # denominator: planned samples


def platform_mention_rates(*, run_id: UUID | str, entity: str) -> list[PlatformMentions]:
    """Mention rate of `entity` per platform. The denominator is every planned sample; failed,
    invalid and pending samples are shown beside it, never dropped."""
    brand_mentioned = Exists(
        Mention.objects.filter(sample_id=OuterRef("pk"), entity=entity, mentioned=True)
    )
    rows = (
        Sample.objects.filter(run_id=run_id)
        .values("platform")
        .annotate(
            planned=Count("id"),
            succeeded=Count("id", filter=SUCCEEDED),
            failed=Count("id", filter=FAILED & TERMINAL),
            invalid=Count("id", filter=INVALID & TERMINAL),
            review=Count("id", filter=REVIEW & TERMINAL),
            pending=Count("id", filter=~TERMINAL),
            mentioned=Count("id", filter=Q(brand_mentioned) & SUCCEEDED),
        )
        .order_by("platform")
    )
    return [
        PlatformMentions(
            platform=row["platform"],
            planned=row["planned"],
            succeeded=row["succeeded"],
            failed=row["failed"],
            invalid=row["invalid"],
            review=row["review"],
            pending=row["pending"],
            mentioned=row["mentioned"],
            mention_rate=rate(row["mentioned"], row["planned"]),
        )
        for row in rows
    ]
