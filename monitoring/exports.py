"""Facts for teams that outgrow one machine: the series and sample-level facts as Parquet in
the evidence store (`manage.py export_facts --since DATE`; docs/facts.md has the layout and a
DuckDB query over it).

Four tables, each partitioned Hive-style by tenant and day (the run's finish date, UTC, as
the series' `day`), one file per run and analysis revision:

    facts/<table>/tenant=<slug>/day=<YYYY-MM-DD>/<run id>-r<revision>.parquet

* `series`: the run's series rows (monitoring.models.SeriesRow), counts per target x scope x
  entity;
* `samples`: one row per planned sample: identity (run, campaign, question, its revision,
  target, repeat), its four layer states, queue state, validity and the report's bucket
  (sampling/buckets.py, through analysis.report_scan's BUCKET_CASE: the same SQL);
* `mentions`: the analysed capture's mention rows in the run's current revision (the
  report's analysed capture: analysis.report_scan NOT_ANALYSED), `counted` when the sample
  succeeded, as the report counts them;
* `citations`: the analysed capture's citations with their host, registrable domain and
  whether the host is one of the brand's domains, `counted` as above.

The store never replaces an object (evidence/storage.py): a run's file of a revision that is
already there is skipped, so exports can be repeated and overlap. A run re-analysed later gets
another file (`-r2`) beside the first; a reader keeps each run's highest `analysis_revision`
(docs/facts.md). Files are built in memory one run at a time and stored after the database
reads, with no transaction open.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from django.core.files.storage import Storage
from django.db import connection

from analysis.models import Mention
from analysis.report_scan import BUCKET_CASE, NOT_ANALYSED, among
from analysis.services import current_revision
from evidence.domains import extract_host, host_matches, registrable_domain
from evidence.models import Capture, Citation
from evidence.storage import evidence_storage, put_new
from sampling import buckets
from sampling.counters import run_param
from sampling.models import Run, Sample
from sampling.snapshots import RunConfig

from .models import COUNTS, SeriesRow
from .services import series_rows

log = logging.getLogger(__name__)

PREFIX = "facts"
TABLES = ("series", "samples", "mentions", "citations")
SAMPLE = Sample._meta.db_table
CAPTURE = Capture._meta.db_table
CITATION = Citation._meta.db_table
MENTION = Mention._meta.db_table
SUCCEEDED = f"({buckets.SUCCEEDED.sql('s')})"

_TS = pa.timestamp("us", tz="UTC")
SCHEMAS: dict[str, pa.Schema] = {
    "series": pa.schema(
        [
            ("run_id", pa.string()),
            ("campaign_id", pa.int64()),
            ("at", _TS),
            ("platform", pa.string()),
            ("region", pa.string()),
            ("device", pa.string()),
            ("mode", pa.string()),
            ("topic", pa.string()),
            ("question_id", pa.int64()),
            ("entity", pa.string()),
            ("is_brand", pa.bool_()),
            ("analysis_revision", pa.int64()),
            ("comparability_key", pa.string()),
            *((name, pa.int64()) for name in COUNTS),
        ]
    ),
    "samples": pa.schema(
        [
            ("sample_id", pa.int64()),
            ("run_id", pa.string()),
            ("campaign_id", pa.int64()),
            ("question_id", pa.int64()),
            ("question_revision_id", pa.int64()),
            ("platform", pa.string()),
            ("region", pa.string()),
            ("device", pa.string()),
            ("mode", pa.string()),
            ("repeat_index", pa.int64()),
            ("submission_state", pa.string()),
            ("collection_state", pa.string()),
            ("evidence_state", pa.string()),
            ("analysis_state", pa.string()),
            ("queue_state", pa.string()),
            ("validity", pa.string()),
            ("bucket", pa.string()),
            ("completed_at", _TS),
            ("analysis_revision", pa.int64()),
        ]
    ),
    "mentions": pa.schema(
        [
            ("sample_id", pa.int64()),
            ("run_id", pa.string()),
            ("capture_id", pa.int64()),
            ("platform", pa.string()),
            ("question_revision_id", pa.int64()),
            ("entity", pa.string()),
            ("is_brand", pa.bool_()),
            ("mentioned", pa.bool_()),
            ("rank", pa.int64()),
            ("sentiment", pa.string()),
            ("recommended", pa.bool_()),
            ("counted", pa.bool_()),
            ("analysis_revision", pa.int64()),
        ]
    ),
    "citations": pa.schema(
        [
            ("sample_id", pa.int64()),
            ("run_id", pa.string()),
            ("capture_id", pa.int64()),
            ("platform", pa.string()),
            ("question_revision_id", pa.int64()),
            ("url", pa.string()),
            ("host", pa.string()),
            ("domain", pa.string()),
            ("own", pa.bool_()),
            ("role", pa.string()),  # cited, or found (consulted, not cited: no citation figure)
            ("counted", pa.bool_()),
            ("analysis_revision", pa.int64()),
        ]
    ),
}


@dataclass(frozen=True)
class Exported:
    runs: int
    files: int
    skipped: int  # files already in the store
    rows: dict[str, int]


def key_for(table: str, *, tenant: str, day: date, run_id: Any, revision: int) -> str:
    return f"{PREFIX}/{table}/tenant={tenant}/day={day.isoformat()}/{run_id}-r{revision}.parquet"


def export_facts(
    *, since: date, until: date | None = None, storage: Storage | None = None
) -> Exported:
    """Every finished run whose finish date (UTC) is within [since, until] into the store."""
    target = storage or evidence_storage()
    runs = Run.objects.filter(
        finished_at__gte=datetime.combine(since, datetime.min.time(), tzinfo=UTC)
    ).select_related("tenant")
    if until is not None:
        runs = runs.filter(finished_at__lt=datetime.combine(until, datetime.max.time(), tzinfo=UTC))
    files = skipped = count = 0
    rows = dict.fromkeys(TABLES, 0)
    for run in runs.order_by("finished_at", "id").iterator():
        count += 1
        revision = current_revision(run_id=run.pk)
        number = revision.number if revision else 0
        assert run.finished_at is not None
        day = run.finished_at.astimezone(UTC).date()
        for table, records in _tables(run, number, revision.pk if revision else None):
            key = key_for(table, tenant=run.tenant.slug, day=day, run_id=run.pk, revision=number)
            if target.exists(key):
                skipped += 1
                continue
            put_new(
                key=key,
                content=parquet(table, records),
                mime="application/vnd.apache.parquet",
                storage=target,
            )
            files += 1
            rows[table] += len(records)
    log.info("facts exported runs=%d files=%d skipped=%d", count, files, skipped)
    return Exported(runs=count, files=files, skipped=skipped, rows=rows)


def parquet(table: str, records: list[dict[str, Any]]) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(records, schema=SCHEMAS[table]), buffer, compression="zstd")
    return buffer.getvalue()


def _tables(
    run: Run, number: int, revision_id: int | None
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    yield "series", _series(run)
    yield "samples", _samples(run, number)
    yield "mentions", _mentions(run, number, revision_id)
    yield "citations", _citations(run, number)


def _series(run: Run) -> list[dict[str, Any]]:
    rows = list(SeriesRow.objects.filter(run_id=run.pk))
    if not rows:  # a run finished before the series existed: its rows as they would be
        rows, _keys = series_rows(run=run)
    fields = SCHEMAS["series"].names
    return [
        {name: getattr(row, name) for name in fields} | {"run_id": str(row.run_id)} for row in rows
    ]


def _fetch(sql: str, params: list[Any]) -> list[dict[str, Any]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        names = [c[0] for c in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _samples(run: Run, number: int) -> list[dict[str, Any]]:
    records = _fetch(
        f"SELECT s.id AS sample_id, s.question_revision_id, s.platform, s.region, s.device, "
        f"s.mode, s.submission_state, s.collection_state, s.evidence_state, s.analysis_state, "
        f"s.queue_state, s.validity, {BUCKET_CASE} AS bucket, s.completed_at "
        f"FROM {SAMPLE} s WHERE s.run_id = %s ORDER BY s.id",
        [run_param(run.pk)],
    )
    config = RunConfig.of(run)
    question_of = {q.revision_id: q.question_id for q in config.questions or ()}
    repeat: dict[tuple[Any, ...], int] = {}
    for record in records:
        target = (record["question_revision_id"], record["platform"], record["region"],
                  record["device"], record["mode"])  # fmt: skip
        record["repeat_index"] = repeat.get(target, 0)
        repeat[target] = record["repeat_index"] + 1
        record |= {
            "run_id": str(run.pk),
            "campaign_id": run.campaign_id,
            "question_id": question_of.get(record["question_revision_id"]),
            "bucket": record["bucket"] or "unclassified",
            "analysis_revision": number,
        }
    return records


def _analysed(alias: str) -> str:
    """The analysed captures of the run (completed, superseded by no later one), as the
    report reads them. Parameters: the run, three times."""
    return (
        f"{alias}.run_id = %s AND {alias}.collection_state = 'completed' "
        f"AND NOT ({among(f'{alias}.id', NOT_ANALYSED)})"
    )


def _mentions(run: Run, number: int, revision_id: int | None) -> list[dict[str, Any]]:
    if revision_id is None:
        return []
    run_ = run_param(run.pk)
    records = _fetch(
        f"SELECT m.sample_id, m.capture_id, m.platform, m.question_revision_id, m.entity, "
        f"m.is_brand, m.mentioned, m.rank, m.sentiment, m.recommended, "
        f"{SUCCEEDED} AS counted "
        f"FROM {MENTION} m JOIN {CAPTURE} c ON c.id = m.capture_id "
        f"JOIN {SAMPLE} s ON s.id = m.sample_id "
        f"WHERE m.revision_id = %s AND {_analysed('c')} ORDER BY m.sample_id, m.entity",
        [revision_id, run_, run_, run_],
    )
    for record in records:
        record |= {"run_id": str(run.pk), "analysis_revision": number}
    return records


def _citations(run: Run, number: int) -> list[dict[str, Any]]:
    run_ = run_param(run.pk)
    records = _fetch(
        f"SELECT ci.sample_id, ci.capture_id, ci.platform, ci.question_revision_id, "
        f"CASE WHEN ci.normalized_url <> '' THEN ci.normalized_url ELSE ci.url END AS url, "
        f"ci.role, {SUCCEEDED} AS counted "
        f"FROM {CITATION} ci JOIN {CAPTURE} c ON c.id = ci.capture_id "
        f"JOIN {SAMPLE} s ON s.id = ci.sample_id "
        f"WHERE {_analysed('c')} ORDER BY ci.id",
        [run_, run_, run_],
    )
    brands = [h for h in (extract_host(d) for d in RunConfig.of(run).brand.domains) if h]
    for record in records:
        host = extract_host(record["url"])
        record |= {
            "run_id": str(run.pk),
            "host": host,
            "domain": registrable_domain(record["url"]),
            "own": host is not None and any(host_matches(host, b) for b in brands),
            "analysis_revision": number,
        }
    return records
