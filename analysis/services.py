"""Brand analysis of a sample's latest capture: validity, mentions, first-mention rank."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evidence.models import Capture
from sampling.models import Sample

from .mentions import Entity, detect_mentions
from .models import Mention
from .validity import classify_answer


@dataclass(frozen=True)
class Verdict:
    valid: bool
    reason: str | None
    ambiguous: bool
    mentions: tuple[Mention, ...] = ()

    def apply(self, sample: Sample) -> None:
        """Store the mentions and move the sample's analysis layer. Call inside the caller's
        fenced transaction, which saves the sample; a repeated analysis (of the same capture,
        or of a later attempt's after a resume) replaces the sample's rows instead of adding
        to them: a sample counts once, from its latest analysed capture."""
        Mention.objects.filter(sample_id=sample.pk).delete()
        Mention.objects.bulk_create(self.mentions)
        sample.validity = "valid" if self.valid else "invalid"
        sample.validity_reason = self.reason or ""
        if not self.valid:
            sample.fail_analysis()
        elif self.ambiguous:
            sample.send_to_review()
        else:
            sample.accept_analysis()


def entities_from_snapshot(snapshot: dict[str, Any]) -> list[Entity]:
    return [
        Entity(
            name=e["name"], aliases=tuple(e.get("aliases", ())), domains=tuple(e.get("domains", ()))
        )
        for e in [snapshot["brand"], *snapshot.get("competitors", [])]
    ]


def analyse_sample(*, sample_id: int) -> Verdict:
    """Analyse the latest completed capture. Reads only; `Verdict.apply` writes."""
    sample = Sample.objects.select_related("run").get(pk=sample_id)
    capture = (
        Capture.objects.filter(sample_id=sample_id, collection_state="completed")
        .order_by("-revision")
        .first()
    )
    if capture is None:
        return Verdict(valid=False, reason="no_capture", ambiguous=False)
    validity = classify_answer(capture.answer_text, collection_state=capture.collection_state)
    snapshot = sample.run.config_snapshot
    entities = entities_from_snapshot(snapshot)
    found = detect_mentions(capture.answer_text, entities)
    brand_name = snapshot["brand"]["name"]
    mentions = tuple(
        Mention(
            sample_id=sample_id,
            capture=capture,
            entity=m.name,
            is_brand=m.name == brand_name,
            mentioned=m.mentioned,
            count=m.count,
            first_position=m.first_position,
            rank=m.rank,
        )
        for m in found
    )
    ambiguous = any(getattr(m, "ambiguous", False) for m in found)
    return Verdict(
        valid=validity.valid, reason=validity.reason, ambiguous=ambiguous, mentions=mentions
    )
