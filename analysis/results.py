"""What an analyser says about one answer, and the one interface every analyser implements.

Context classes (docs/decisions.md, "Mention context"):
    recommended, listed, compared, negative — the entity is mentioned; these count in rates;
    absence — the answer only says it knows nothing about it; other_sense — the alias is an
    everyday word used in that sense (苹果 the fruit). These two never count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from .mentions import AmbiguousSpan, Entity

RECOMMENDED = "recommended"
LISTED = "listed"
COMPARED = "compared"
NEGATIVE = "negative"
ABSENCE = "absence"
OTHER_SENSE = "other_sense"
COUNTED = (RECOMMENDED, NEGATIVE, COMPARED, LISTED)  # strongest first
NOT_COUNTED = (ABSENCE, OTHER_SENSE)
CONTEXTS = (*COUNTED, *NOT_COUNTED)
SENTIMENTS = ("positive", "neutral", "negative")


@dataclass(frozen=True)
class Occurrence:
    """One literal match of an alias, with the context class of that occurrence."""

    start: int
    end: int
    context: str

    def as_dict(self) -> dict[str, object]:
        return {"start": self.start, "end": self.end, "context": self.context}


@dataclass(frozen=True)
class EntityAnalysis:
    """One entity in one answer. `context` is None when no alias matched at all."""

    name: str
    context: str | None = None
    sentiment: str = "neutral"
    recommended: bool = False
    sentence: str = ""  # the sentence that supports context and sentiment
    count: int = 0  # counted occurrences
    first_position: int | None = None  # of the first counted occurrence
    rank: int | None = None  # among counted entities, by first counted position
    occurrences: tuple[Occurrence, ...] = ()
    unsure: str = ""  # why a person should look, "" when sure

    @property
    def counted(self) -> bool:
        return self.context in COUNTED

    @property
    def matched(self) -> int:
        return len(self.occurrences)


@dataclass(frozen=True)
class AnswerAnalysis:
    entities: tuple[EntityAnalysis, ...]
    ambiguous: tuple[AmbiguousSpan, ...] = ()
    # Set when the analyser could not analyse at all (an LLM judge's unusable reply).
    failure: str = ""

    def by_name(self, name: str) -> EntityAnalysis:
        for item in self.entities:
            if item.name == name:
                return item
        raise KeyError(name)

    @property
    def review_reason(self) -> str:
        """Why the sample needs an analyst, "" when it does not."""
        reasons = [f"{e.name}: {e.unsure}" for e in self.entities if e.unsure]
        reasons += [
            f"'{span.text}' matches {', '.join(span.entities)} equally" for span in self.ambiguous
        ]
        if self.failure:
            reasons.append(self.failure)
        return "; ".join(reasons)

    @property
    def review_sentence(self) -> str:
        for entity in self.entities:
            if entity.unsure:
                return entity.sentence
        return ""


@dataclass(frozen=True)
class AnalyserInfo:
    name: str
    version: str
    # True: the same text and entities always give the same result, so the report may
    # re-derive stored results and require equality.
    deterministic: bool


class Analyser(Protocol):
    info: AnalyserInfo

    def analyse(self, text: str, entities: Sequence[Entity]) -> AnswerAnalysis: ...


def with_ranks(entities: Sequence[EntityAnalysis]) -> tuple[EntityAnalysis, ...]:
    """Rank 1 = the counted entity whose first counted occurrence comes first."""
    order = sorted(
        (e for e in entities if e.counted and e.first_position is not None),
        key=lambda e: e.first_position or 0,
    )
    ranks = {e.name: rank for rank, e in enumerate(order, start=1)}
    return tuple(replace(e, rank=ranks.get(e.name)) for e in entities)
