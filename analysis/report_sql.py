"""Report metrics aggregated in SQL over one analysis revision: sentiment distribution and
recommendation rate (no per-sample list in Python), and competitor head-to-head per question
from the counts the report's mention pass adds up (analysis.report_scan).

Only succeeded samples count, as in `analysis.reports`; each sample has one set of mention
rows per revision (`analysis.services`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from django.db.models import Count, Exists, OuterRef, Q, QuerySet

from sampling.models import Run, Sample
from sampling.selectors import SUCCEEDED

from .models import Mention
from .results import SENTIMENTS
from .stats import Rate, rate


def _counted(run: Run, revision_id: int) -> QuerySet[Mention]:
    """The revision's mention rows of succeeded samples: all but those of the run's samples
    that are not succeeded (a small set, where the succeeded ones are most of the run)."""
    others = (
        Sample.objects.filter(run_id=run.pk).exclude(SUCCEEDED).filter(pk=OuterRef("sample_id"))
    )
    return Mention.objects.filter(~Exists(others), revision_id=revision_id)


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
        return {**asdict(self), "brand_ahead": self.brand_ahead.as_dict()}


def head_to_head(pairs: dict[tuple[int, str], tuple[int, int, int, int, int]]) -> list[HeadToHead]:
    """From the mention pass (analysis.report_scan, `Groups.pairs`): each competitor's mention
    rows of succeeded samples beside the same sample's brand row of the revision. A sample
    without a brand row counts in `answers` only."""
    return [
        HeadToHead(
            question_revision_id=question,
            competitor=entity,
            answers=answers,
            both=both,
            brand_only=brand_only,
            competitor_only=competitor_only,
            brand_ahead=rate(ahead, both),
        )
        for (question, entity), (answers, both, ahead, brand_only, competitor_only) in pairs.items()
    ]
