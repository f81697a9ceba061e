"""Brand analysis write operations: the pipeline's analysis of a sample (revision 1), and
re-analysis of a whole run from stored answers as a new revision."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.db import connection, transaction
from django.db.models import Max, Model
from django.db.models.functions import Now

from evidence.models import Capture
from sampling.locking import lock_run
from sampling.models import Run, Sample
from sampling.plainsql import insert_rows
from sampling.services import complete_outbox, enqueue_outbox
from sampling.snapshots import RunConfig

from .analysers import get_analyser
from .mentions import Entity
from .models import AmbiguousWord, AnalysisResult, AnalysisRevision, Mention, RevisionState
from .results import Analyser, AnswerAnalysis
from .selectors import mention_differences
from .validity import classify_answer

REANALYSE_TASK = "analysis.reanalyse_batch"
REANALYSE_BATCH = 200


@dataclass(frozen=True)
class Verdict:
    valid: bool
    reason: str | None
    ambiguous: bool
    mentions: tuple[Mention, ...] = ()
    result: AnalysisResult | None = None

    def apply(self, sample: Sample) -> None:
        """Store the result and move the sample's analysis layer. Call inside the caller's
        fenced transaction, which saves the sample; a repeated analysis of the same sample
        in the same revision replaces its rows instead of adding to them."""
        if self.result is not None:
            _store(self.result, self.mentions)
        self.decide(sample)

    def rows(self) -> list[Model]:
        """The result and mention rows `apply` stores, for a caller that writes them with the
        sample in one statement (a sample analysed for the first time in its revision)."""
        return [] if self.result is None else [self.result, *self.mentions]

    def decide(self, sample: Sample) -> None:
        """The sample's analysis layer moved, the rows left to the caller (`rows`)."""
        sample.validity = "valid" if self.valid else "invalid"
        sample.validity_reason = self.reason or ""
        if not self.valid:
            sample.fail_analysis()
        elif self.ambiguous:
            sample.send_to_review()
        else:
            sample.accept_analysis()


RESULT_FIELDS = (
    "capture_id",
    "valid",
    "validity_reason",
    "review_reason",
    "review_sentence",
    "analyser",
    "analyser_version",
)


def _store(result: AnalysisResult, mentions: Sequence[Mention]) -> None:
    """Write one sample's analysis into its revision. A repeat that finds the same result
    stored writes nothing (a duplicate delivery leaves the rows as they were); a different
    result in the same revision (the pipeline re-analysing a repaired capture) replaces it."""
    if _insert_unless_stored(result) or _replace_unless_same(result, mentions):
        # One plain INSERT (sampling/plainsql.py): bulk_create's query building cost most of
        # the write.
        insert_rows(mentions)


def _replace_unless_same(result: AnalysisResult, mentions: Sequence[Mention]) -> bool:
    """Write `result` in place of the revision's stored one, unless that one and its mention
    rows are the same; True when the mentions are to be written."""
    same_sample = {"revision": result.revision, "sample_id": result.sample_id}
    stored = AnalysisResult.objects.filter(**same_sample).first()
    if stored is not None and all(
        getattr(stored, name) == getattr(result, name) for name in RESULT_FIELDS
    ):
        rows = list(Mention.objects.filter(**same_sample))
        if not mention_differences(result.sample_id, rows, mentions):
            return False
    if stored is not None:  # a sample's mentions are only ever written with its result
        AnalysisResult.objects.filter(**same_sample).delete()
        Mention.objects.filter(**same_sample).delete()
    result.save()
    return True


def _insert_unless_stored(result: AnalysisResult) -> bool:
    """Insert the result row unless its revision already holds one for the sample (the
    unique constraint analysis_result_unique): one statement where a SELECT and an INSERT
    were two, for the common case of a sample analysed for the first time. False when nothing
    was written: a row was there (the caller compares with it), a key is missing (the caller's
    `save()` then refuses the unsaved related object, as before), or the database is not
    PostgreSQL (the embedded SQLite default keeps the ORM, as sampling/plainsql.py does)."""
    if (
        connection.vendor != "postgresql"
        or result.pk is not None
        or result.revision_id is None
        or result.sample_id is None
        or result.capture_id is None
    ):
        return False
    return bool(insert_rows([result], ignore_conflicts=True))


# --- entities ---------------------------------------------------------------------------------


def entities_from_snapshot(
    config: RunConfig, ambiguous_words: dict[str, list[str]] | None = None
) -> list[Entity]:
    """The run's frozen entities, with the words the revision marked ambiguous (else those
    the snapshot carries)."""
    marked = ambiguous_words or {}
    return [
        Entity(
            name=e.name,
            aliases=e.aliases,
            domains=e.domains,
            ambiguous_words=tuple(marked.get(e.name, e.ambiguous_words or ())),
        )
        for e in config.entities
    ]


def _ambiguous_words(run: Run) -> dict[str, list[str]]:
    marked: dict[str, list[str]] = {}
    for entity, word in (
        AmbiguousWord.objects.filter(campaign_id=run.campaign_id)
        .order_by("entity", "word")
        .values_list("entity", "word")
    ):
        marked.setdefault(entity, []).append(word)
    return marked


# --- revisions --------------------------------------------------------------------------------


def pipeline_revision(*, run: Run) -> AnalysisRevision:
    """The run's revision 1, made by the first sample analysed; its settings frozen then."""
    cached = _PIPELINE_REVISIONS.get(run.pk)
    if cached is None:
        cached = _pipeline_revision(run)
        if len(_PIPELINE_REVISIONS) >= _CACHED_REVISIONS:
            _PIPELINE_REVISIONS.clear()
        _PIPELINE_REVISIONS[run.pk] = cached
    return copy.copy(cached)


# Revision 1 of a run never changes once made (its analyser and words are frozen; later
# re-analyses are new rows): each worker keeps the few it is working on instead of reading
# the row again for every sample. Copies are handed out, so no caller shares one.
_PIPELINE_REVISIONS: dict[Any, AnalysisRevision] = {}
_CACHED_REVISIONS = 256


def _pipeline_revision(run: Run) -> AnalysisRevision:
    existing = AnalysisRevision.objects.filter(run_id=run.pk, number=1).first()
    if existing is not None:
        return existing
    info = get_analyser().info
    revision, _created = AnalysisRevision.objects.get_or_create(
        run_id=run.pk,
        number=1,
        defaults={
            "analyser": info.name,
            "analyser_version": info.version,
            "ambiguous_words": _ambiguous_words(run),
            "state": RevisionState.PIPELINE,
        },
    )
    return revision


def current_revision(*, run_id: UUID | str) -> AnalysisRevision | None:
    """The newest finished re-analysis, else the pipeline's revision 1."""
    revisions = AnalysisRevision.objects.filter(run_id=run_id)
    done = revisions.filter(state=RevisionState.DONE, number__gt=1).order_by("-number").first()
    return done or revisions.filter(number=1).first()


def analysed_capture(*, sample_id: int) -> Capture | None:
    return (
        Capture.objects.filter(sample_id=sample_id, collection_state="completed")
        .order_by("-revision")
        .first()
    )


# --- analysis of one answer ---------------------------------------------------------------


@dataclass
class Derived:
    result: AnalysisResult
    mentions: list[Mention] = field(default_factory=list)
    analysis: AnswerAnalysis | None = None


def derive(
    *, sample: Sample, capture: Capture, revision: AnalysisRevision, analyser: Analyser
) -> Derived:
    """The rows an analysis of this capture gives, unsaved, with the run's frozen campaign
    and the revision's frozen settings. No writes; an LLM judge calls its platform here, so
    never call this inside a transaction."""
    config = RunConfig.of(revision.run)
    validity = classify_answer(capture.answer_text, collection_state=capture.collection_state)
    info = analyser.info
    common = {"analyser": info.name, "analyser_version": info.version}
    entities = entities_from_snapshot(config, revision.ambiguous_words)
    analysis = analyser.analyse(capture.answer_text, entities)
    result = AnalysisResult(
        revision=revision,
        sample_id=sample.pk,
        capture=capture,
        valid=validity.valid,
        validity_reason=validity.reason or "",
        review_reason=analysis.review_reason,
        review_sentence=analysis.review_sentence,
        **common,
    )
    brand = config.brand.name
    mentions = [
        Mention(
            sample_id=sample.pk,
            platform=sample.platform,
            question_revision_id=sample.question_revision_id,
            capture=capture,
            revision=revision,
            entity=e.name,
            is_brand=e.name == brand,
            mentioned=e.counted,
            count=e.count,
            matched=e.matched,
            first_position=e.first_position,
            rank=e.rank,
            context=e.context or "",
            sentiment=e.sentiment,
            recommended=e.recommended,
            sentence=e.sentence,
            occurrences=[o.as_dict() for o in e.occurrences],
            unsure=e.unsure,
            **common,
        )
        for e in analysis.entities
    ]
    with_brand(mentions)
    return Derived(result=result, mentions=mentions, analysis=analysis)


def with_brand(mentions: list[Mention]) -> None:
    """Copy the brand row's result onto the competitors' rows of the same answer."""
    brand = next((m for m in mentions if m.is_brand), None)
    for mention in mentions:
        if brand is not None and not mention.is_brand:
            mention.brand_mentioned = brand.mentioned
            mention.brand_rank = brand.rank


def analyse_sample(*, sample_id: int) -> Verdict:
    """Analyse the latest completed capture into the run's revision 1. Reads only (and
    creates the revision row); `Verdict.apply` writes."""
    sample = Sample.objects.select_related("run").get(pk=sample_id)
    capture = analysed_capture(sample_id=sample_id)
    if capture is None:
        return Verdict(valid=False, reason="no_capture", ambiguous=False)
    revision = pipeline_revision(run=sample.run)
    revision.run = sample.run
    analyser = get_analyser(revision.analyser)
    return _verdict(derive(sample=sample, capture=capture, revision=revision, analyser=analyser))


def _verdict(derived: Derived) -> Verdict:
    return Verdict(
        valid=derived.result.valid,
        reason=derived.result.validity_reason or None,
        ambiguous=bool(derived.result.review_reason),
        mentions=tuple(derived.mentions),
        result=derived.result,
    )


# Analysers that only compute (no upstream call, no I/O): cheap enough to run in the step that
# collected the answer, before its fenced write.
LOCAL_ANALYSERS = frozenset({"rules"})


@dataclass(frozen=True)
class AnalysisAhead:
    """An analysis derived from an answer before its capture row exists (the step that
    collected it analyses it in the same fenced write: `verdict_for` the capture it wrote)."""

    derived: Derived

    def verdict_for(self, capture: Capture) -> Verdict:
        self.derived.result.capture = capture
        for mention in self.derived.mentions:
            mention.capture = capture
        return _verdict(self.derived)


def analyse_ahead(
    *, sample: Sample, answer_text: str, collection_state: str
) -> AnalysisAhead | None:
    """The analysis of an answer just collected, computed before the transaction that records
    it, when the run's revision 1 uses a local analyser; None otherwise (the sample then goes
    to the analysis queue as its own step). `sample` carries its run. Reads only (and creates
    the revision row)."""
    revision = pipeline_revision(run=sample.run)
    if revision.analyser not in LOCAL_ANALYSERS:
        return None
    revision.run = sample.run
    analyser = get_analyser(revision.analyser)
    unsaved = Capture(answer_text=answer_text, collection_state=collection_state)
    return AnalysisAhead(
        derive(sample=sample, capture=unsaved, revision=revision, analyser=analyser)
    )


# --- re-analysis ----------------------------------------------------------------------------


class ReanalysisError(Exception):
    pass


def start_reanalysis(
    *, run_id: UUID | str, analyser: str | None = None, batch_size: int = REANALYSE_BATCH
) -> AnalysisRevision:
    """A new revision for the whole run, and one analysis-queue message per batch of sample
    ids (through the outbox, in the same transaction)."""
    info = get_analyser(analyser).info
    with transaction.atomic():
        run = lock_run(run_id)  # one new number at a time
        last = AnalysisRevision.objects.filter(run_id=run.pk).aggregate(n=Max("number"))["n"]
        sample_ids = list(
            Sample.objects.filter(run_id=run.pk, captures__collection_state="completed")
            .distinct()
            .order_by("id")
            .values_list("id", flat=True)
        )
        revision = AnalysisRevision.objects.create(
            run=run,
            number=max(last or 1, 1) + 1,  # 1 is the pipeline's, even before it starts
            analyser=info.name,
            analyser_version=info.version,
            source=current_revision(run_id=run.pk),
            ambiguous_words=_ambiguous_words(run),
            expected=len(sample_ids),
        )
        for index, start in enumerate(range(0, len(sample_ids), batch_size)):
            enqueue_outbox(
                task=REANALYSE_TASK,
                payload={
                    "revision_id": revision.pk,
                    "sample_ids": sample_ids[start : start + batch_size],
                },
                queue="analysis",
                dedupe_key=f"reanalyse:{revision.pk}:{index}",
            )
        if not sample_ids:
            finish_revision_if_complete(revision_id=revision.pk)
    return revision


def reanalyse_samples(
    *, revision_id: int, sample_ids: Iterable[int], outbox_id: int | None = None
) -> int:
    """Analyse these samples' stored answers into the revision. Idempotent: a redelivered
    batch replaces its own rows. Returns how many samples were analysed. The batch's outbox
    message (`outbox_id`) is completed once every sample of it is stored."""
    revision = AnalysisRevision.objects.select_related("run").get(pk=revision_id)
    analyser = get_analyser(revision.analyser)
    if analyser.info.version != revision.analyser_version:
        raise ReanalysisError(
            f"revision {revision.number} was started with {revision.analyser} "
            f"{revision.analyser_version}; this worker has {analyser.info.version}"
        )
    done = 0
    for sample in Sample.objects.filter(pk__in=list(sample_ids), run_id=revision.run_id):
        capture = analysed_capture(sample_id=sample.pk)
        if capture is None:
            continue
        derived = derive(sample=sample, capture=capture, revision=revision, analyser=analyser)
        with transaction.atomic():
            _store(derived.result, derived.mentions)
        done += 1
    with transaction.atomic():
        finish_revision_if_complete(revision_id=revision_id)
        complete_outbox(outbox_id=outbox_id)
    return done


@dataclass(frozen=True)
class RevisionDone:
    """What a follower of a finished re-analysis is told: the run and its new revision."""

    run_id: UUID
    revision_id: int
    number: int


# As pipeline/runs.py's run-end followers: an upper layer (the metrics series, monitoring)
# registers by name from its AppConfig.ready what follows a revision's end; the follower
# writes outbox rows in the caller's transaction and does nothing else (no network I/O, no
# commit), and is idempotent (dedupe keys). An explicit call, not a signal.
RevisionFollower = Callable[[RevisionDone], None]
_revision_followers: dict[str, RevisionFollower] = {}


def follow_revision_done(*, name: str, follower: RevisionFollower) -> None:
    """Register what follows every re-analysis that finishes. By name: a second registration
    under the same name replaces the first."""
    _revision_followers[name] = follower


def finish_revision_if_complete(*, revision_id: int) -> bool:
    """Mark the revision done once every expected sample is analysed; exactly once (a
    conditional update), and then, in the same transaction, its followers are told. Call
    inside a transaction."""
    analysed = AnalysisResult.objects.filter(revision_id=revision_id).count()
    done = bool(
        AnalysisRevision.objects.filter(
            pk=revision_id, state=RevisionState.RUNNING, expected__lte=analysed
        ).update(state=RevisionState.DONE, finished_at=Now())
    )
    if done and _revision_followers:
        run_id, number = AnalysisRevision.objects.values_list("run_id", "number").get(
            pk=revision_id
        )
        told = RevisionDone(run_id=run_id, revision_id=revision_id, number=number)
        for follower in _revision_followers.values():
            follower(told)
    return done
