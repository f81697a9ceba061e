"""Archive what a connector returned. Objects are written to storage before the database
transaction (no network I/O inside a transaction); the rows that make them visible are
written by the caller's transaction. An object without a row is harmless garbage; a row
without its object cannot happen."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import transaction

from connectors.base import NormalizedResult

from .models import Capture, Citation, EvidenceKind, EvidenceObject


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


def object_key(*, tenant: str, run_id: str, sample_id: int, revision: int, kind: str) -> str:
    return f"{tenant}/{run_id}/{sample_id}/{revision}/{kind}"


def _put(key: str, content: bytes, mime: str, kind: str) -> StoredObject:
    # file_overwrite is off: an existing key is never replaced; storage picks another name and
    # we record the name it actually used.
    saved_as = default_storage.save(key, ContentFile(content))
    return StoredObject(
        kind=kind,
        key=saved_as,
        sha256=hashlib.sha256(content).hexdigest(),
        size=len(content),
        mime=mime,
    )


def archive_objects(
    *, result: NormalizedResult, tenant: str, run_id: str, sample_id: int, revision: int
) -> ArchivedResult:
    """Write raw response, answer text, citations and attachments to storage. No DB writes."""

    def key(kind: str) -> str:
        return object_key(
            tenant=tenant, run_id=run_id, sample_id=sample_id, revision=revision, kind=kind
        )

    archived = ArchivedResult(result=result, revision=revision)
    archived.objects.append(
        _put(
            key("raw"), result.raw, result.raw_mime or "application/octet-stream", EvidenceKind.RAW
        )
    )
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
    return archived


def record_capture(*, sample_id: int, attempt_no: int | None, archived: ArchivedResult) -> Capture:
    """The rows for archived objects. Call inside the transaction that changes sample state."""
    result = archived.result
    capture = Capture.objects.create(
        sample_id=sample_id,
        revision=archived.revision,
        attempt_no=attempt_no,
        upstream_id=result.upstream_id or "",
        collection_state=result.collection_state,
        answer_text=result.answer_text,
        warnings=list(result.warnings),
        error=result.error,
        status_code=result.status_code,
        upstream_cost=result.cost,
        upstream_cost_currency=result.cost_currency or "",
        captured_at=result.captured_at,
    )
    EvidenceObject.objects.bulk_create(
        EvidenceObject(
            capture=capture, kind=o.kind, key=o.key, sha256=o.sha256, size=o.size, mime=o.mime
        )
        for o in archived.objects
    )
    Citation.objects.bulk_create(
        Citation(
            capture=capture,
            position=i,
            url=c.url,
            normalized_url=c.normalized_url,
            domain=(urlsplit(c.normalized_url).hostname or ""),
            title=c.title or "",
            start=c.start,
            end=c.end,
        )
        for i, c in enumerate(result.citations)
    )
    return capture


def next_revision(*, sample_id: int) -> int:
    last = Capture.objects.filter(sample_id=sample_id).order_by("-revision").first()
    return (last.revision if last else 0) + 1


def read_object(*, key: str) -> bytes:
    with default_storage.open(key, "rb") as handle:
        data: bytes = handle.read()
    return data


def reparse_sample(*, sample_id: int) -> tuple[Capture, NormalizedResult]:
    """Re-derive a sample's result from its stored raw response, as a new capture revision.

    Nothing is asked upstream again and no earlier revision is touched, so a parser fix can be
    applied to past data and compared with what was derived at the time.
    """
    from connectors.registry import adapter_class
    from sampling.models import Sample

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
    result = adapter_class(sample.platform).parse(raw, content_type=source.mime, sample_id=sample_id)
    result.upstream_id = result.upstream_id or source.capture.upstream_id
    archived = archive_objects(
        result=result,
        tenant=sample.run.config_snapshot["tenant"],
        run_id=str(sample.run_id),
        sample_id=sample_id,
        revision=next_revision(sample_id=sample_id),
    )
    with transaction.atomic():
        capture = record_capture(
            sample_id=sample_id, attempt_no=source.capture.attempt_no, archived=archived
        )
    return capture, result
