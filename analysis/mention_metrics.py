"""Report metrics of the mention rows: sentiment distribution and recommendation rate per
entity, and competitor head-to-head per question, as rates of the tallies the report's mention
pass adds up in SQL (analysis.report_scan; no per-sample list in Python).

Only succeeded samples count, as in `analysis.reports`; each sample has one set of mention
rows per revision (`analysis.services`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .report_scan import Sentiments
from .results import SENTIMENTS
from .stats import Rate, rate


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


def sentiment_distribution(
    counted: dict[str, Sentiments], entities: list[str]
) -> list[SentimentStat]:
    """Per entity, from the mention pass (analysis.report_scan, `Groups.sentiments`): its
    mentioned rows of the revision's succeeded samples, every row and not only the analysed
    capture's; an entity without rows has n = 0."""
    out = []
    for entity in entities:
        stat = counted.get(entity, Sentiments())
        n = stat.mentioned
        out.append(
            SentimentStat(
                entity=entity,
                mentioned=n,
                shares={s: rate(stat.by_sentiment[s], n) for s in SENTIMENTS},
                recommended=rate(stat.recommended, n),
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
