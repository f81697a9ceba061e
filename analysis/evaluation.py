"""Agreement of an analyser with a labelled golden set (tests/analysis/golden/README.md).

Units are (answer, entity) pairs the golden set labels. Per context class: precision and
recall; over all classes: accuracy and Cohen's kappa; "counted" is the two-way question the
rates depend on (one of the four counted classes, or not). An entity the analyser does not
find at all is predicted "none". Sentiment and recommendation get accuracy and kappa too.
Self-agreement: the same analyser run again over the same answers, agreement and kappa of
the contexts between the runs (1.0 for a deterministic analyser).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .mentions import Entity
from .results import CONTEXTS, COUNTED, Analyser, AnswerAnalysis

NONE = "none"


@dataclass(frozen=True)
class GoldenItem:
    id: str
    text: str
    entities: tuple[Entity, ...]
    labels: dict[str, tuple[str, str, bool]]  # entity -> (context, sentiment, recommended)


def load_golden(directory: Path) -> list[GoldenItem]:
    campaigns = json.loads((directory / "campaigns.json").read_text(encoding="utf-8"))
    items = []
    for line_no, line in enumerate(
        (directory / "answers.jsonl").read_text(encoding="utf-8").splitlines(), start=1
    ):
        if not line.strip():
            continue
        raw = json.loads(line)
        campaign = campaigns[raw["campaign"]]
        entities = tuple(
            entity_from_dict(e) for e in [campaign["brand"], *campaign.get("competitors", [])]
        )
        labels = {name: (v[0], v[1], bool(v[2])) for name, v in raw["labels"].items()}
        unknown = set(labels) - {e.name for e in entities}
        bad = [v[0] for v in labels.values() if v[0] not in CONTEXTS]
        if unknown or bad:
            raise ValueError(
                f"answers.jsonl line {line_no}: unknown entity or class {unknown or bad}"
            )
        items.append(GoldenItem(raw["id"], raw["text"], entities, labels))
    return items


def entity_from_dict(data: dict[str, Any]) -> Entity:
    return Entity(
        name=data["name"],
        aliases=tuple(data.get("aliases", ())),
        domains=tuple(data.get("domains", ())),
        ambiguous_words=tuple(data.get("ambiguous_words", ())),
    )


@dataclass(frozen=True)
class ClassScore:
    name: str
    support: int  # labelled
    predicted: int
    correct: int

    @property
    def precision(self) -> float | None:
        return self.correct / self.predicted if self.predicted else None

    @property
    def recall(self) -> float | None:
        return self.correct / self.support if self.support else None


@dataclass
class Evaluation:
    analyser: str
    version: str
    answers: int
    pairs: int
    classes: list[ClassScore]
    counted: ClassScore
    context_accuracy: float
    context_kappa: float
    sentiment_accuracy: float
    sentiment_kappa: float
    recommended_accuracy: float
    recommended_kappa: float
    review: int  # pairs the analyser was unsure about
    errors: list[str] = field(default_factory=list)
    self_agreement: float | None = None
    self_kappa: float | None = None
    repeats: int = 1

    def score(self, name: str) -> ClassScore:
        return next(c for c in self.classes if c.name == name)


def cohen_kappa(a: Sequence[object], b: Sequence[object]) -> float:
    """Cohen's kappa of two labellings of the same units; 1.0 when both are constant and equal."""
    n = len(a)
    if n == 0:
        return 1.0
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    ca, cb = Counter(a), Counter(b)
    expected = sum(ca[k] * cb[k] for k in set(ca) | set(cb)) / (n * n)
    if expected == 1.0:
        return 1.0 if observed == 1.0 else 0.0
    return (observed - expected) / (1.0 - expected)


def _predicted(result: AnswerAnalysis, name: str) -> tuple[str, str, bool, bool]:
    entity = result.by_name(name)
    return (entity.context or NONE, entity.sentiment, entity.recommended, bool(entity.unsure))


def evaluate(
    analyser: Analyser,
    items: Sequence[GoldenItem],
    *,
    repeats: int = 1,
    progress: Callable[[int], None] | None = None,
) -> Evaluation:
    gold: list[tuple[str, str, bool]] = []
    pred: list[tuple[str, str, bool, bool]] = []
    rounds: list[list[str]] = [[] for _ in range(max(repeats, 1))]
    errors = []
    for done, item in enumerate(items, start=1):
        results = [analyser.analyse(item.text, item.entities) for _ in rounds]
        for name, label in item.labels.items():
            got = _predicted(results[0], name)
            gold.append(label)
            pred.append(got)
            for r, result in zip(rounds, results, strict=True):
                r.append(_predicted(result, name)[0])
            if got[0] != label[0]:
                errors.append(f"{item.id} {name}: labelled {label[0]}, got {got[0]}")
        if progress:
            progress(done)
    evaluation = _scores(analyser, items, gold, pred, errors)
    if repeats > 1:
        pairs = [(i, j) for i in range(len(rounds)) for j in range(i + 1, len(rounds))]
        evaluation.self_agreement = sum(
            sum(x == y for x, y in zip(rounds[i], rounds[j], strict=True)) / len(rounds[i])
            for i, j in pairs
        ) / len(pairs)
        evaluation.self_kappa = sum(cohen_kappa(rounds[i], rounds[j]) for i, j in pairs) / len(
            pairs
        )
        evaluation.repeats = repeats
    return evaluation


def _scores(
    analyser: Analyser,
    items: Sequence[GoldenItem],
    gold: list[tuple[str, str, bool]],
    pred: list[tuple[str, str, bool, bool]],
    errors: list[str],
) -> Evaluation:
    g_ctx = [g[0] for g in gold]
    p_ctx = [p[0] for p in pred]

    def score(name: str, member: Callable[[str], bool]) -> ClassScore:
        return ClassScore(
            name=name,
            support=sum(member(g) for g in g_ctx),
            predicted=sum(member(p) for p in p_ctx),
            correct=sum(member(g) and member(p) for g, p in zip(g_ctx, p_ctx, strict=True)),
        )

    n = len(gold)
    return Evaluation(
        analyser=analyser.info.name,
        version=analyser.info.version,
        answers=len(items),
        pairs=n,
        classes=[score(c, frozenset({c}).__contains__) for c in CONTEXTS],
        counted=score("counted", lambda x: x in COUNTED),
        context_accuracy=sum(g == p for g, p in zip(g_ctx, p_ctx, strict=True)) / n,
        context_kappa=cohen_kappa(g_ctx, p_ctx),
        sentiment_accuracy=sum(g[1] == p[1] for g, p in zip(gold, pred, strict=True)) / n,
        sentiment_kappa=cohen_kappa([g[1] for g in gold], [p[1] for p in pred]),
        recommended_accuracy=sum(g[2] == p[2] for g, p in zip(gold, pred, strict=True)) / n,
        recommended_kappa=cohen_kappa([g[2] for g in gold], [p[2] for p in pred]),
        review=sum(p[3] for p in pred),
        errors=errors,
    )


def _fmt(value: float | None) -> str:
    return "  -  " if value is None else f"{value:.3f}"


def render_table(evaluation: Evaluation) -> str:
    e = evaluation
    lines = [
        f"analyser {e.analyser} {e.version}: {e.answers} answers, {e.pairs} labelled "
        f"(answer, entity) pairs, {e.review} sent to review",
        f"{'class':<14}{'support':>8}{'predicted':>10}{'precision':>10}{'recall':>8}",
    ]
    for c in [*e.classes, e.counted]:
        lines.append(
            f"{c.name:<14}{c.support:>8}{c.predicted:>10}{_fmt(c.precision):>10}{_fmt(c.recall):>8}"
        )
    lines += [
        f"context      accuracy {e.context_accuracy:.3f}  Cohen's kappa {e.context_kappa:.3f}",
        f"sentiment    accuracy {e.sentiment_accuracy:.3f}  Cohen's kappa {e.sentiment_kappa:.3f}",
        f"recommended  accuracy {e.recommended_accuracy:.3f}  "
        f"Cohen's kappa {e.recommended_kappa:.3f}",
    ]
    if e.self_agreement is not None:
        lines.append(
            f"self-agreement over {e.repeats} judgements: {e.self_agreement:.3f} "
            f"(mean pairwise Cohen's kappa {e.self_kappa:.3f})"
        )
    return "\n".join(lines)
