"""Report metrics aggregated in SQL over one analysis revision: sentiment distribution,
recommendation rate and competitor head-to-head per question (no per-sample list in Python).

Only succeeded samples count, as in `analysis.reports`; each sample has one set of mention
rows per revision (`analysis.services`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Count, F, OuterRef, Q, QuerySet, Subquery

from sampling.models import Run, Sample
from sampling.selectors import SUCCEEDED

from .models import Mention
from .results import SENTIMENTS
from .stats import Rate, rate


def _counted(run: Run, revision_id: int) -> QuerySet[Mention]:
    succeeded = Sample.objects.filter(SUCCEEDED, run_id=run.pk).values("id")
    return Mention.objects.filter(revision_id=revision_id, sample_id__in=Subquery(succeeded))


@dataclass(frozen=True)
class SentimentStat:
    entity: str
    mentioned: int
    shares: dict[str, Rate]  # sentiment -> share of the entity's mentions
    recommended: Rate  # share of the entity's mentions that recommend it

    def as_dict(self) -> dict[str, Any]:
        return {
            "entity": self.entity,
            "mentioned": self.mentioned,
            "sentiment": {k: v.as_dict() for k, v in self.shares.items()},
            "recommended": self.recommended.as_dict(),
        }


def sentiment_distribution(run: Run, revision_id: int, entities: list[str]) -> list[SentimentStat]:
    rows = (
        _counted(run, revision_id)
        .filter(mentioned=True)
        .values("entity")
        .annotate(
            n=Count("id"),
            recommended_n=Count("id", filter=Q(recommended=True)),
            **{s: Count("id", filter=Q(sentiment=s)) for s in SENTIMENTS},
        )
        .order_by()
    )
    by_entity = {row["entity"]: row for row in rows}
    out = []
    for entity in entities:
        row = by_entity.get(entity, {})
        n = row.get("n", 0)
        out.append(
            SentimentStat(
                entity=entity,
                mentioned=n,
                shares={s: rate(row.get(s, 0), n) for s in SENTIMENTS},
                recommended=rate(row.get("recommended_n", 0), n),
            )
        )
    return out


@dataclass(frozen=True)
class HeadToHead:
    question_revision_id: int
    competitor: str
    answers: int
    both: int
    brand_only: int
    competitor_only: int
    brand_ahead: Rate  # of answers naming both, the brand named first

    def as_dict(self) -> dict[str, Any]:
        return {
            "question_revision_id": self.question_revision_id,
            "competitor": self.competitor,
            "answers": self.answers,
            "both": self.both,
            "brand_only": self.brand_only,
            "competitor_only": self.competitor_only,
            "brand_ahead": self.brand_ahead.as_dict(),
        }


def head_to_head(run: Run, revision_id: int) -> list[HeadToHead]:
    brand = Mention.objects.filter(
        revision_id=revision_id, sample_id=OuterRef("sample_id"), is_brand=True
    )
    rows = (
        _counted(run, revision_id)
        .filter(is_brand=False)
        .annotate(
            brand_mentioned=Subquery(brand.values("mentioned")[:1]),
            brand_rank=Subquery(brand.values("rank")[:1]),
        )
        .values("sample__question_revision_id", "entity")
        .annotate(
            answers=Count("id"),
            both=Count("id", filter=Q(mentioned=True, brand_mentioned=True)),
            ahead=Count(
                "id", filter=Q(mentioned=True, brand_mentioned=True, brand_rank__lt=F("rank"))
            ),
            brand_only=Count("id", filter=Q(mentioned=False, brand_mentioned=True)),
            competitor_only=Count("id", filter=Q(mentioned=True, brand_mentioned=False)),
        )
        .order_by("sample__question_revision_id", "entity")
    )
    return [
        HeadToHead(
            question_revision_id=row["sample__question_revision_id"],
            competitor=row["entity"],
            answers=row["answers"],
            both=row["both"],
            brand_only=row["brand_only"],
            competitor_only=row["competitor_only"],
            brand_ahead=rate(row["ahead"], row["both"]),
        )
        for row in rows
    ]
