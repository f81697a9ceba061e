"""Reads over analysis revisions: progress of a re-analysis, and differences between two
analyses of the same samples (field by field, named)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from sampling.models import Campaign

from .lexicon import COMMON_WORDS
from .mentions import normalize_alias
from .models import AmbiguousWord, AnalysisResult, AnalysisRevision, Mention, RevisionState

COMPARED_FIELDS = (
    "capture_id",
    "mentioned",
    "count",
    "matched",
    "first_position",
    "rank",
    "context",
    "sentiment",
    "recommended",
    "sentence",
    "occurrences",
    "unsure",
    "is_brand",
)


def mention_differences(
    sample_id: int, stored: Sequence[Mention], derived: Sequence[Mention]
) -> list[str]:
    """Field-by-field differences between two analyses of one sample."""
    before = {m.entity: m for m in stored}
    after = {m.entity: m for m in derived}
    out = []
    for entity in sorted(set(before) | set(after)):
        a, b = before.get(entity), after.get(entity)
        if a is None or b is None:
            out.append(
                f"sample {sample_id}: {entity}: a row only in the "
                f"{'re-derived' if a is None else 'stored'} analysis"
            )
            continue
        out += [
            f"sample {sample_id}: {entity}: {name} stored {getattr(a, name)!r}, "
            f"re-derived {getattr(b, name)!r}"
            for name in COMPARED_FIELDS
            if getattr(a, name) != getattr(b, name)
        ]
    return out


def revision_differences(first: AnalysisRevision, second: AnalysisRevision) -> list[str]:
    """Every difference between two revisions of one run: samples analysed in only one,
    and mention fields."""
    rows: dict[int, tuple[list[Mention], list[Mention]]] = defaultdict(lambda: ([], []))
    for mention in Mention.objects.filter(revision__in=[first, second]).order_by("id"):
        rows[mention.sample_id][0 if mention.revision_id == first.pk else 1].append(mention)
    samples = [
        set(AnalysisResult.objects.filter(revision=r).values_list("sample_id", flat=True))
        for r in (first, second)
    ]
    out = [f"sample {s}: analysed only in revision {first.number}" for s in samples[0] - samples[1]]
    out += [
        f"sample {s}: analysed only in revision {second.number}" for s in samples[1] - samples[0]
    ]
    for sample_id in sorted(rows):
        out += mention_differences(sample_id, *rows[sample_id])
    return out


@dataclass(frozen=True)
class Progress:
    done: int
    expected: int
    finished: bool


def revision_progress(*, revision_id: int) -> Progress:
    revision = AnalysisRevision.objects.get(pk=revision_id)
    done = AnalysisResult.objects.filter(revision_id=revision_id).count()
    return Progress(
        done=done, expected=revision.expected, finished=revision.state == RevisionState.DONE
    )


def ambiguity_warnings(*, campaign: Campaign) -> list[str]:
    """The plan preview's warnings: aliases that are common words and that the campaign has
    not marked as ambiguous (they would count in their everyday sense only by luck)."""
    marked = {
        (entity, normalize_alias(word))
        for entity, word in AmbiguousWord.objects.filter(campaign=campaign).values_list(
            "entity", "word"
        )
    }
    entities = [
        (campaign.brand.name, campaign.brand.aliases),
        *((c.name, c.aliases) for c in campaign.competitors.all()),
    ]
    warnings = []
    for name, aliases in entities:
        for alias in dict.fromkeys([name, *aliases]):
            normalized = normalize_alias(alias)
            if normalized in COMMON_WORDS and (name, normalized) not in marked:
                warnings.append(
                    f"Alias '{alias}' of {name} is a common word: mark it as an ambiguous word "
                    "(Analysis › Ambiguous words) so that only its brand sense counts."
                )
    return warnings


def analysis_review_note(*, sample_id: int) -> str:
    """Why the pipeline's analysis sent this sample to review, with the sentence, or ""."""
    result = (
        AnalysisResult.objects.filter(sample_id=sample_id, revision__number=1)
        .exclude(review_reason="")
        .first()
    )
    if result is None:
        return ""
    sentence = f" — «{result.review_sentence}»" if result.review_sentence else ""
    return f"{result.review_reason}{sentence}"
