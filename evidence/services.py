"""Archive what a connector returned. Objects are written to storage before the database
transaction (no network I/O inside a transaction); the rows that make them visible are
written by the caller's transaction. An object without a row is harmless garbage; a row
without its object cannot happen."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass, field
from datetime import datetime
from itertools import groupby

from django.db import connection, transaction
from django.db.models import Model

from connectors.base import NormalizedResult
from connectors.registry import adapter_class
from sampling.locking import Level, locked
from sampling.models import CollectionState, Sample
from sampling.plainsql import cursor as plain_cursor
from sampling.plainsql import insert_rows
from sampling.snapshots import RunConfig
from sampling.transitions import ReviewNotAllowed, decide_analysis_review

from .domains import registrable_domain
from .models import (
    Capture,
    Citation,
    CitationRole,
    EvidenceKind,
    EvidenceObject,
    ReviewDecision,
    ReviewDecisionKind,
    SearchQuery,
)
from .screenshots import make_thumbnail
from .storage import evidence_storage, put_new

log = logging.getLogger(__name__)

THUMBNAIL_UNAVAILABLE = "THUMBNAIL_UNAVAILABLE"
# A raw body at least this big that is byte for byte one an earlier revision of the sample
# stored (each retry of an upstream that sends the same cut-off 32 MiB) is not stored again:
# the capture names that revision instead (RAW_SAME_AS_REVISION_<n>). Smaller bodies are
# stored with each revision, so a revision reads on its own.
RAW_DEDUPE_MIN_BYTES = 1024 * 1024
RAW_SAME_AS_REVISION = "RAW_SAME_AS_REVISION_"


@dataclass(frozen=True)
class StoredObject:
    kind: str
    key: str
    sha256: str
    size: int
    mime: str


@dataclass
class ArchivedResult:
    """Objects already in storage, waiting for their rows."""

    result: NormalizedResult
    revision: int
    objects: list[StoredObject] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # what archiving itself could not do


def object_key(*, tenant: str, run_id: str, sample_id: int, revision: int, kind: str) -> str:
    return f"{tenant}/{run_id}/{sample_id}/{revision}/{kind}"


def _put(key: str, content: bytes, mime: str, kind: str) -> StoredObject:
    # An existing key is never replaced (evidence.storage): storage picks another name and we
    # record the name it actually used.
    put = put_new(key=key, content=content, mime=mime)
    return StoredObject(kind=kind, key=put.key, sha256=put.sha256, size=put.size, mime=mime)


def _put_thumbnail(key: str, image: bytes) -> StoredObject | None:
    """A separate, small copy of a screenshot; the original is kept at full resolution."""
    try:
        thumbnail = make_thumbnail(image)
    except ValueError as error:
        log.warning("no thumbnail for %s: %s", key, error)
        return None
    return _put(key, thumbnail, "image/png", EvidenceKind.THUMBNAIL)


def archive_objects(
    *, result: NormalizedResult, tenant: str, run_id: str, sample_id: int, revision: int
) -> ArchivedResult:
    """Write raw response, answer text, citations and attachments to storage. No DB writes."""

    def key(kind: str) -> str:
        return object_key(
            tenant=tenant, run_id=run_id, sample_id=sample_id, revision=revision, kind=kind
        )

    archived = ArchivedResult(result=result, revision=revision)
    stored_in = _revision_holding(sample_id=sample_id, raw=result.raw)
    if stored_in is not None:
        archived.warnings.append(f"{RAW_SAME_AS_REVISION}{stored_in}")
    else:
        mime = result.raw_mime or "application/octet-stream"
        archived.objects.append(_put(key("raw"), result.raw, mime, EvidenceKind.RAW))
    if result.answer_text:
        archived.objects.append(
            _put(
                key("text"),
                result.answer_text.encode(),
                "text/plain; charset=utf-8",
                EvidenceKind.TEXT,
            )
        )
    if result.citations:
        body = json.dumps([c.__dict__ for c in result.citations], ensure_ascii=False).encode()
        archived.objects.append(
            _put(key("citations"), body, "application/json", EvidenceKind.CITATIONS)
        )
    for attachment in result.attachments:
        archived.objects.append(
            _put(key(attachment.kind), attachment.content, attachment.mime, attachment.kind)
        )
        if attachment.kind == EvidenceKind.SCREENSHOT:
            thumbnail = _put_thumbnail(key(EvidenceKind.THUMBNAIL), attachment.content)
            if thumbnail is None:
                archived.warnings.append(THUMBNAIL_UNAVAILABLE)
            else:
                archived.objects.append(thumbnail)
    return archived


def _revision_holding(*, sample_id: int, raw: bytes) -> int | None:
    """The earliest revision of the sample whose stored raw body is `raw`, for a body of at
    least RAW_DEDUPE_MIN_BYTES (None: store it). Compared by size and sha256, as recorded."""
    if len(raw) < RAW_DEDUPE_MIN_BYTES:
        return None
    return (
        EvidenceObject.objects.filter(
            capture__sample_id=sample_id,
            kind=EvidenceKind.RAW,
            size=len(raw),
            sha256=hashlib.sha256(raw).hexdigest(),
        )
        .order_by("revision")
        .values_list("revision", flat=True)
        .first()
    )


def record_capture(
    *,
    sample: Sample,
    attempt_no: int | None,
    archived: ArchivedResult,
    token: int | None = None,
    captured_at: datetime | None = None,
) -> Capture:
    """The rows for archived objects. Call inside the transaction that changes sample state;
    the rows copy the sample's run, platform and question revision (fixed at planning).
    `captured_at`: when the answer was received, in database time (the answer inbox's
    `received_at`); None: now, the database's time of this write. Never the result's own
    `captured_at`, which is the clock of the worker that parsed it."""
    capture, children = capture_rows(
        sample=sample,
        attempt_no=attempt_no,
        archived=archived,
        token=token,
        captured_at=captured_at,
    )
    # Plain statements (sampling/plainsql.py): these rows are written for every answer.
    insert_rows([capture])
    for _model, rows in groupby(children, key=type):
        insert_rows(list(rows))  # their key to the capture taken from it now
    return capture


def capture_rows(
    *,
    sample: Sample,
    attempt_no: int | None,
    archived: ArchivedResult,
    token: int | None = None,
    captured_at: datetime | None = None,
) -> tuple[Capture, list[Model]]:
    """`record_capture`'s rows, not yet written: the capture, and its objects, citations and
    search queries (grouped by model), which point at it (`record_capture` writes them; so
    does the one statement of `plainsql.write_if`)."""
    result = archived.result
    completed = result.collection_state == CollectionState.COMPLETED
    capture = Capture(
        sample_id=sample.pk,
        run_id=sample.run_id,
        revision=archived.revision,
        attempt_no=attempt_no,
        fencing_token=token,
        upstream_id=result.upstream_id or "",
        collection_state=result.collection_state,
        answer_text=result.answer_text,
        warnings=[*result.warnings, *(w for w in archived.warnings if w not in result.warnings)],
        error=result.error,
        status_code=result.status_code,
        upstream_cost=result.cost,
        upstream_cost_currency=result.cost_currency or "",
        supersedes_id=_latest_completed(sample.pk, archived.revision) if completed else None,
    )
    if captured_at is not None:
        capture.captured_at = captured_at
    return capture, _capture_children(sample, capture, archived)


def _capture_children(sample: Sample, capture: Capture, archived: ArchivedResult) -> list[Model]:
    """The capture's objects, then its citations, then its search queries."""
    result = archived.result
    identity = {
        "run_id": sample.run_id,
        "platform": sample.platform,
        "question_revision_id": sample.question_revision_id,
    }
    objects: list[Model] = [
        EvidenceObject(capture=capture, revision=capture.revision, **asdict(o))
        for o in archived.objects
    ]
    # Cited sources first (positions 0..), then those found but not cited, numbered on.
    sources = [(c, CitationRole.CITED) for c in result.citations]
    sources += [(c, CitationRole.FOUND) for c in result.found]
    citations: list[Model] = [
        Citation(
            capture=capture,
            sample_id=sample.pk,
            **identity,
            position=i,
            role=role,
            url=c.url,
            normalized_url=c.normalized_url,
            # Registrable domain (eTLD+1) from the offline public-suffix list.
            domain=_storable_domain(registrable_domain(c.normalized_url or c.url)),
            title=c.title or "",
            start=c.start,
            end=c.end,
        )
        for i, (c, role) in enumerate(sources)
    ]
    searches: list[Model] = [
        SearchQuery(capture=capture, sample_id=sample.pk, **identity, position=i, query=q)
        for i, q in enumerate(result.search_queries)
    ]
    return [*objects, *citations, *searches]


# The newest completed capture of a sample below a revision: the one a new completed capture
# replaces as the analysed capture (revisions only grow, `next_revision`).
_LATEST_COMPLETED = f"""SELECT id FROM {Capture._meta.db_table}
 WHERE sample_id = %s AND collection_state = %s AND revision < %s
 ORDER BY revision DESC LIMIT 1"""


def _latest_completed(sample_id: int, revision: int) -> int | None:
    if revision <= 1:
        return None  # revisions start at 1: a first capture replaces none (one read less)
    with connection.cursor() as cursor:
        cursor.execute(_LATEST_COMPLETED, [sample_id, CollectionState.COMPLETED.value, revision])
        row = cursor.fetchone()
    return None if row is None else int(row[0])


def _storable_domain(domain: str | None) -> str:
    """A cited domain longer than any hostname (253) is not one; it is left blank."""
    return domain if domain and len(domain) <= 253 else ""


def next_revision(*, sample_id: int) -> int:
    # Once per answer: one plain statement, without the ORM's compilation.
    with plain_cursor() as cursor:  # prepared: once per answer
        cursor.execute(_LAST_REVISION, [sample_id])
        last = cursor.fetchone()[0]
    return (last or 0) + 1


_LAST_REVISION = f"SELECT max(revision) FROM {Capture._meta.db_table} WHERE sample_id = %s"


def read_object(*, key: str) -> bytes:
    with evidence_storage().open(key, "rb") as handle:
        data: bytes = handle.read()
    return data


def reparse_sample(*, sample_id: int) -> tuple[Capture, NormalizedResult]:
    """Re-derive a sample's result from its stored raw response, as a new capture revision.

    Nothing is asked upstream again and no earlier revision is touched, so a parser fix can be
    applied to past data and compared with what was derived at the time.
    """
    sample = Sample.objects.select_related("run").get(pk=sample_id)
    source = (
        EvidenceObject.objects.filter(capture__sample_id=sample_id, kind=EvidenceKind.RAW)
        .select_related("capture")
        .order_by("-capture__revision")
        .first()
    )
    if source is None:
        raise LookupError(f"sample {sample_id} has no stored raw response to re-parse")
    raw = read_object(key=source.key)
    result = adapter_class(sample.platform).parse(
        raw, content_type=source.mime, sample_id=sample_id
    )
    result.upstream_id = result.upstream_id or source.capture.upstream_id
    archived = archive_objects(
        result=result,
        tenant=RunConfig.of(sample.run).tenant,
        run_id=str(sample.run_id),
        sample_id=sample_id,
        revision=next_revision(sample_id=sample_id),
    )
    with transaction.atomic():
        capture = record_capture(
            sample=sample, attempt_no=source.capture.attempt_no, archived=archived
        )
    return capture, result


class EvidenceExists(Exception):
    """The capture already holds an object of this kind; stored evidence is never replaced."""


def store_screenshot(*, sample_id: int, capture_id: int, png: bytes) -> list[EvidenceObject]:
    """Attach a rendered screenshot (and its thumbnail) to a capture that has none.

    Objects are written to storage first, outside any transaction; the rows follow in a short
    transaction of their own. Call it outside the caller's transaction. If the capture already
    has a screenshot nothing is replaced: `EvidenceExists` is raised (the objects just written
    are unreferenced garbage, never visible evidence).
    """
    capture = Capture.objects.select_related("sample__run").get(pk=capture_id)
    if capture.sample_id != sample_id:
        raise ValueError(f"capture {capture_id} does not belong to sample {sample_id}")
    if capture.evidence_objects.filter(kind=EvidenceKind.SCREENSHOT).exists():
        raise EvidenceExists(f"capture {capture_id} already has a screenshot")
    sample = capture.sample

    def key(kind: str) -> str:
        return object_key(
            tenant=RunConfig.of(sample.run).tenant,
            run_id=str(sample.run_id),
            sample_id=sample_id,
            revision=capture.revision,
            kind=kind,
        )

    stored = [_put(key(EvidenceKind.SCREENSHOT), png, "image/png", EvidenceKind.SCREENSHOT)]
    thumbnail = _put_thumbnail(key(EvidenceKind.THUMBNAIL), png)
    if thumbnail is not None:
        stored.append(thumbnail)
    with transaction.atomic():
        capture = locked(Capture.objects.all(), level=Level.CAPTURE).get(pk=capture_id)
        if capture.evidence_objects.filter(kind=EvidenceKind.SCREENSHOT).exists():
            raise EvidenceExists(f"capture {capture_id} already has a screenshot")
        return list(
            insert_rows(
                [
                    EvidenceObject(capture=capture, revision=capture.revision, **asdict(o))
                    for o in stored
                ]
            )
        )


def decide_review(
    *, sample_id: int, decision: str, reviewer_id: int | None, note: str = ""
) -> ReviewDecision:
    """An analyst's decision on a finished sample, through the sample's one write path.

    accepted / rejected: analysis review -> accepted / failed. acknowledged: partial evidence
    seen and accepted as it is (the answer already counts; nothing in the state machine
    changes). Each decision is recorded with the states before and after.
    """
    if decision not in _REVIEW_DECISIONS:
        raise ReviewNotAllowed(f"unknown decision {decision!r}")
    with transaction.atomic():
        sample, before = decide_analysis_review(
            sample_id=sample_id, approve=_REVIEW_DECISIONS[decision]
        )
        capture = (
            Capture.objects.filter(sample_id=sample_id, collection_state="completed")
            .order_by("-revision")
            .first()
        )
        return ReviewDecision.objects.create(
            sample=sample,
            capture=capture,
            decision=decision,
            reviewer_id=reviewer_id,
            note=note[:2000],
            analysis_state_before=before,
            analysis_state_after=sample.analysis_state,
        )


# decision -> approve (True), reject (False), or acknowledge partial evidence (None)
_REVIEW_DECISIONS: dict[str, bool | None] = {
    ReviewDecisionKind.ACCEPTED: True,
    ReviewDecisionKind.REJECTED: False,
    ReviewDecisionKind.ACKNOWLEDGED: None,
}
