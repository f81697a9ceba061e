"""The answer inbox: a direct API's answer, kept in the database before anything else is
asked of it (sampling.models.AnswerInbox; docs/decisions.md, "An answer in hand is kept before
it is archived").

`keep` writes the row inside the caller's fenced transaction (the one that closes the attempt),
`kept_answer` reads it back for a later archive step, `result_of` rebuilds the connector's
result from it, `consumed` deletes it in the write that records the capture.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import asdict
from typing import Any

from django.db import connection

from connectors.base import Attachment, Citation, NormalizedResult

from .models import AnswerInbox, Attempt
from .plainsql import columns, from_row, insert_rows
from .plainsql import cursor as plain_cursor


def keep(*, attempt: Attempt, result: NormalizedResult, upstream_id: str) -> AnswerInbox:
    """The inbox row of `attempt`'s answer (one plain INSERT; `received_at` is database time,
    read back with it). Call inside the fenced write that closes the attempt."""
    entry = entry_for(attempt=attempt, result=result, upstream_id=upstream_id)
    insert_rows([entry])
    return entry


def entry_for(*, attempt: Attempt, result: NormalizedResult, upstream_id: str) -> AnswerInbox:
    """The inbox row of `attempt`'s answer, not yet written (`keep` writes it; so does the
    one statement of `SampleStep.write_at_once`)."""
    return AnswerInbox(
        sample_id=attempt.sample_id,
        attempt_id=attempt.pk,
        raw=result.raw,
        raw_mime=result.raw_mime or "",
        sha256=hashlib.sha256(result.raw).hexdigest(),
        status_code=result.status_code,
        request_id=result.request_id or "",
        upstream_id=upstream_id or result.upstream_id or "",
        result=_result_fields(result),
    )


def _result_fields(result: NormalizedResult) -> dict[str, Any]:
    """Everything of the result but the raw (a column of its own) and the worker's clock."""
    return {
        "collection_state": result.collection_state,
        "evidence_state": result.evidence_state,
        "answer_text": result.answer_text,
        "citations": [asdict(c) for c in result.citations],
        "found": [asdict(c) for c in result.found],
        "search_queries": list(result.search_queries),
        "screenshot_key": result.screenshot_key,
        "error": result.error,
        "warnings": list(result.warnings),
        "cost": result.cost,
        "cost_currency": result.cost_currency,
        "attachments": [
            {"kind": a.kind, "mime": a.mime, "content": base64.b64encode(a.content).decode()}
            for a in result.attachments
        ],
    }


def result_of(entry: AnswerInbox) -> NormalizedResult:
    """The connector's result as it was received, rebuilt from the inbox row."""
    fields = entry.result
    return NormalizedResult(
        sample_id=entry.sample_id,
        upstream_id=entry.upstream_id or None,
        collection_state=fields["collection_state"],
        evidence_state=fields["evidence_state"],
        answer_text=fields["answer_text"],
        raw=bytes(entry.raw),
        raw_mime=entry.raw_mime,
        citations=[Citation(**c) for c in fields["citations"]],
        # Absent from rows kept before fan-out and found sources were recorded.
        found=[Citation(**c) for c in fields.get("found", [])],
        search_queries=list(fields.get("search_queries", [])),
        screenshot_key=fields["screenshot_key"],
        captured_at=entry.received_at,
        status_code=entry.status_code,
        error=fields["error"],
        warnings=list(fields["warnings"]),
        cost=fields["cost"],
        cost_currency=fields["cost_currency"],
        request_id=entry.request_id or None,
        attachments=[
            Attachment(kind=a["kind"], content=base64.b64decode(a["content"]), mime=a["mime"])
            for a in fields["attachments"]
        ],
    )


_KEPT = f"""SELECT {columns(AnswerInbox, "i")} FROM {AnswerInbox._meta.db_table} i
 WHERE i.sample_id = %s ORDER BY i.id DESC LIMIT 1"""


def kept_answer(*, sample_id: int) -> AnswerInbox | None:
    """The sample's answer waiting to be archived (its newest, should there be several)."""
    with connection.cursor() as cursor:
        cursor.execute(_KEPT, [sample_id])
        row = cursor.fetchone()
    return None if row is None else from_row(AnswerInbox, row)


_CONSUMED = f"DELETE FROM {AnswerInbox._meta.db_table} WHERE id = %s"


def consumed(entry: AnswerInbox) -> None:
    """The answer is archived and its capture recorded in this transaction: the evidence
    store holds it from now on, so the row (the raw body, possibly megabytes) goes."""
    with plain_cursor() as cursor:  # prepared: once per direct answer
        cursor.execute(_CONSUMED, [entry.pk])
