"""Provider statements imported in the background (issue 28 point 8).

The web process never holds a statement: the upload's size is checked against
GEO_STATEMENT_MAX_BYTES from Content-Length before the body is read (`refuse_oversized`),
Django's upload handler spools the body to disk, and the file is copied in chunks to the
default storage (the evidence store: the same for web and workers; docs/decisions.md,
"Statement imports run in a worker"). A `StatementImport` row and its outbox message are
committed together; the worker (`run_import`, through billing/tasks.py) reads the file twice
as it goes (check every row, then write in batches under the provider's lock) and reports
progress on the row. The import is all or nothing, like billing.reconciliation's.
"""

from __future__ import annotations

import shutil
from datetime import timedelta
from tempfile import TemporaryFile
from typing import Any
from uuid import uuid4

from django.conf import settings
from django.core.files.base import File
from django.core.files.storage import default_storage
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction
from django.db.models import Q
from django.db.models.functions import Now
from django.http import HttpRequest
from django.utils import timezone

from sampling.services import complete_outbox, enqueue_outbox

from .models import ImportStatus, StatementImport
from .reconciliation import (
    ImportResult,
    StatementError,
    configured_provider,
    import_statement_file,
    max_statement_bytes,
    too_large,
)

TASK = "billing.import_statement"
# Multipart framing around the file (boundaries, the provider field): the body may exceed the
# file's limit by this much.
FORM_OVERHEAD = 64 * 1024
MAX_STORED_ERRORS = 200
FINISHED = (ImportStatus.DONE, ImportStatus.FAILED)


COPY_CHUNK = 1024 * 1024


def body_limit() -> int:
    return max_statement_bytes() + FORM_OVERHEAD


def oversized_body(request: HttpRequest) -> str | None:
    """The 413 message for an upload whose declared length is over the limit, read from the
    headers only (nothing of the body has been read when this is asked)."""
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return None
    if length > body_limit():
        return too_large(length)
    return None


def queue_import(*, provider: str, upload: File[Any], imported_by: str) -> StatementImport:
    """Keep the uploaded file and queue its import; a StatementError for an unknown provider
    or a file over the limit (checked on the spooled upload's size, not its content)."""
    provider = configured_provider(provider)
    size = int(upload.size or 0)
    if size > max_statement_bytes():
        raise StatementError([too_large(size)])
    if size == 0:
        raise StatementError(["file is empty"])
    # Storage I/O before the transaction (no network inside one); save() copies in chunks.
    stored = default_storage.save(f"statements/imports/{uuid4().hex}.csv", upload)
    with transaction.atomic():
        job = StatementImport.objects.create(
            provider=provider,
            filename=(upload.name or "statement.csv")[:255],
            stored_name=stored,
            size=size,
            imported_by=imported_by[:150],
        )
        enqueue_outbox(task=TASK, payload={"import_id": job.pk})
    return job


# --- the worker's side ----------------------------------------------------------------------


def _claim(import_id: int) -> bool:
    """queued → running, or a running import whose progress stopped (its worker died): a
    conditional update whose row count says whether this worker has it."""
    stale = timezone.now() - timedelta(seconds=float(settings.GEO_STATEMENT_IMPORT_STALE_SECONDS))
    claimable = Q(status=ImportStatus.QUEUED) | Q(status=ImportStatus.RUNNING, updated_at__lt=stale)
    return bool(
        StatementImport.objects.filter(claimable, pk=import_id).update(
            status=ImportStatus.RUNNING, started_at=Now(), updated_at=Now()
        )
    )


class _Reporter:
    """Progress onto the import row. Inside the import's transaction the row is written
    through a connection of its own (autocommit), so a reader sees the batches as they are
    written; the import's transaction never touches the row before its last statement, so
    the two never wait on each other. SQLite has one writer: no progress while writing."""

    def __init__(self, import_id: int) -> None:
        self.import_id = import_id
        self._side: Any = None

    def __call__(self, *, checked: int = -1, total: int = -1, done: int = -1) -> None:
        fields = {
            name: value
            for name, value in (
                ("rows_checked", checked),
                ("rows_total", total),
                ("rows_done", done),
            )
            if value >= 0
        }
        if not connection.in_atomic_block:
            StatementImport.objects.filter(pk=self.import_id).update(**fields, updated_at=Now())
        elif connection.vendor == "postgresql":
            self._side_update(fields)

    def _side_update(self, fields: dict[str, int]) -> None:
        if self._side is None:
            main = connections[DEFAULT_DB_ALIAS]
            self._side = type(main)(dict(main.settings_dict), alias="statement-progress")
        sets = ", ".join(f"{name} = %s" for name in fields)
        table = StatementImport._meta.db_table
        with self._side.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET {sets}, updated_at = now() WHERE id = %s",
                [*fields.values(), self.import_id],
            )

    def close(self) -> None:
        if self._side is not None:
            self._side.close()


def _finish(import_id: int, outbox_id: int | None, result: ImportResult) -> None:
    rows = result.imported + result.already_known
    StatementImport.objects.filter(pk=import_id).update(
        rows_total=rows,
        rows_checked=rows,
        status=ImportStatus.DONE,
        statement=result.statement,
        created=result.created,
        imported=result.imported,
        already_known=result.already_known,
        rows_done=rows,
        finished_at=Now(),
        updated_at=Now(),
    )
    complete_outbox(outbox_id=outbox_id)


def _fail(import_id: int, outbox_id: int | None, problems: list[str]) -> None:
    errors = problems[:MAX_STORED_ERRORS]
    if len(problems) > MAX_STORED_ERRORS:
        errors.append(f"... and {len(problems) - MAX_STORED_ERRORS} more problem(s)")
    with transaction.atomic():
        StatementImport.objects.filter(pk=import_id).update(
            status=ImportStatus.FAILED, errors=errors, finished_at=Now(), updated_at=Now()
        )
        complete_outbox(outbox_id=outbox_id)


def run_import(*, import_id: int, outbox_id: int | None = None) -> str:
    """Check and write one queued import (at least once: a repeat of a finished import only
    completes its message; one another worker is running is left to it). The status."""
    if not _claim(import_id):
        job = StatementImport.objects.filter(pk=import_id).first()
        if job is None or job.status in FINISHED:
            complete_outbox(outbox_id=outbox_id)
        return job.status if job is not None else "missing"
    job = StatementImport.objects.get(pk=import_id)
    reporter = _Reporter(import_id)
    try:
        # A local copy first: the second pass reads the file inside the transaction that
        # writes the lines, and that must not wait on the store's network (S3).
        with default_storage.open(job.stored_name, "rb") as stored, TemporaryFile() as stream:
            shutil.copyfileobj(stored, stream, COPY_CHUNK)
            import_statement_file(
                provider=job.provider,
                filename=job.filename,
                stream=stream,
                imported_by=job.imported_by,
                progress=reporter,
                finish=lambda result: _finish(import_id, outbox_id, result),
            )
    except StatementError as error:
        _fail(import_id, outbox_id, error.problems)
        return ImportStatus.FAILED
    except FileNotFoundError:
        _fail(
            import_id, outbox_id, ["the uploaded file is no longer in the store; upload it again"]
        )
        return ImportStatus.FAILED
    finally:
        reporter.close()
    return ImportStatus.DONE


def progress(job: StatementImport) -> dict[str, Any]:
    """What the console and the API show of an import."""
    return {
        "id": job.pk,
        "status": job.status,
        "provider": job.provider,
        "filename": job.filename,
        "size": job.size,
        "rows_total": job.rows_total,
        "rows_checked": job.rows_checked,
        "rows_done": job.rows_done,
        "errors": job.errors,
        "statement_id": job.statement_id,
        "created": job.created,
        "imported": job.imported,
        "already_known": job.already_known,
        "queued_at": job.queued_at,
        "finished_at": job.finished_at,
    }
