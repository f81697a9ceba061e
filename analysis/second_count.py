"""The report's independent second count: mentions re-derived from the stored answer text.

The first count is the stored `Mention` rows. The second reads each sampled record's answer
from its latest completed capture, runs the revision's analyser on it with the revision's
frozen settings, and compares field by field. It only applies when the revision's analyser
is deterministic and still at the stored version (an LLM judge cannot be re-asked for the
same words; an old version must first be re-analysed); otherwise the check says so.

Which records: every succeeded sample of runs up to `FULL_RECOUNT_LIMIT` samples; above that
a deterministic sample of that many, ordered by md5 of the sample id.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from django.db.models import CharField, QuerySet
from django.db.models.functions import MD5, Cast

from evidence.models import Capture
from sampling.buckets import SUCCEEDED
from sampling.models import Run, Sample

from .analysers import get_analyser
from .models import AnalysisRevision, Mention
from .selectors import mention_differences
from .services import derive

FULL_RECOUNT_LIMIT = 10_000
CHUNK = 500


@dataclass(frozen=True)
class SecondCount:
    records: int  # re-derived records
    of: int  # succeeded records
    differences: list[str]
    skipped: str = ""  # why nothing was re-derived


def _records(run: Run) -> QuerySet[Sample]:
    succeeded = Sample.objects.filter(SUCCEEDED.q(), run_id=run.pk)
    if run.planned_samples <= FULL_RECOUNT_LIMIT:
        return succeeded.order_by("id")
    return succeeded.annotate(h=MD5(Cast("id", CharField()))).order_by("h")[:FULL_RECOUNT_LIMIT]


def _chunks(samples: QuerySet[Sample]) -> Iterator[list[Sample]]:
    chunk: list[Sample] = []
    for sample in samples.iterator(chunk_size=CHUNK):
        chunk.append(sample)
        if len(chunk) == CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _latest_captures(sample_ids: list[int]) -> dict[int, Capture]:
    latest: dict[int, Capture] = {}
    for found in Capture.objects.filter(sample_id__in=sample_ids, collection_state="completed"):
        known = latest.get(found.sample_id)
        if known is None or found.revision > known.revision:
            latest[found.sample_id] = found
    return latest


def second_count(run: Run, revision: AnalysisRevision, succeeded: int | None = None) -> SecondCount:
    """`succeeded`: the run's succeeded samples if the caller has counted them (the report's
    record scan has), else counted here."""
    revision.run = run
    if succeeded is None:
        succeeded = Sample.objects.filter(SUCCEEDED.q(), run_id=run.pk).count()
    analyser = get_analyser(revision.analyser)
    info = analyser.info
    if not info.deterministic or info.version != revision.analyser_version:
        why = (
            f"{info.name} is not deterministic"
            if not info.deterministic
            else f"revision made with {revision.analyser} {revision.analyser_version}, "
            f"current version {info.version}: reanalyse the run to re-check"
        )
        return SecondCount(records=0, of=succeeded, differences=[], skipped=why)
    differences: list[str] = []
    records = 0
    for chunk in _chunks(_records(run)):
        ids = [s.pk for s in chunk]
        latest = _latest_captures(ids)
        stored: dict[int, list[Mention]] = {}
        for mention in Mention.objects.filter(revision=revision, sample_id__in=ids):
            stored.setdefault(mention.sample_id, []).append(mention)
        for sample in chunk:
            records += 1
            capture = latest.get(sample.pk)
            if capture is None:
                differences.append(f"sample {sample.pk}: succeeded without a completed capture")
                continue
            derived = derive(sample=sample, capture=capture, revision=revision, analyser=analyser)
            # The cause before its consequences: the report shows the first differences only.
            if any(m.capture_id != capture.pk for m in stored.get(sample.pk, [])):
                differences.append(
                    f"sample {sample.pk}: stored mentions are not on its latest capture "
                    f"{capture.pk}"
                )
            differences += mention_differences(
                sample.pk, stored.get(sample.pk, []), derived.mentions
            )
    return SecondCount(records=records, of=succeeded, differences=differences)
