"""Plan expansion: a run's samples, written in plan order (docs/decisions.md, "Plan expansion
in SQL").

The order is platform by platform, and inside a platform repeat 0 of every question first, so
early batches cover all questions; batches are consecutive slices of a platform's samples.

On PostgreSQL the samples are produced by the database itself: one `INSERT ... SELECT` over
the run's platforms and `generate_series`, where sample number k of a platform gives its
target (k mod targets), its question revision ((k / targets) mod questions), its repeat
(k / (targets x questions)) and its batch (k / batch limit). Nothing per sample crosses the
connection, so expansion costs what the table's indexes cost. Elsewhere (the embedded SQLite
demo) the same rows are built in Python (`sample_rows`) and written by `copy_insert`; a test
plans one campaign both ways and finds the same samples.

Columns that the expansion does not compute take the model field's own default, so the model
stays the one place that defines them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models.expressions import DatabaseDefault

from .bulk import column_defaults, copy_insert
from .dbtime import db_now
from .models import Batch, Run, Sample
from .planning import CampaignSpec, batch_sizes

# Columns computed per sample; every other column takes the model's default.
_COMPUTED = (
    "run_id",
    "batch_id",
    "tenant_id",
    "question_revision_id",
    "platform",
    "device",
    "region",
    "mode",
    "repeat_index",
    "priority",
    "due_at",
)

# Sample k (0-based) of platform p. The lateral generate_series runs once per platform row,
# in order (a nested loop over the platforms' ordinality), so ids follow plan order.
_SELECT = """
SELECT %(run)s,
       (%(batch_ids)s::bigint[])[p.first_batch + k / p.batch_limit + 1],
       %(tenant)s,
       (%(revision_ids)s::bigint[])[(k / p.targets) %% %(questions)s + 1],
       p.platform,
       (%(devices)s::text[])[p.first_target + k %% p.targets + 1],
       (%(regions)s::text[])[p.first_target + k %% p.targets + 1],
       (%(modes)s::text[])[p.first_target + k %% p.targets + 1],
       k / (p.targets * %(questions)s),
       %(priority)s,
       %(due_at)s::timestamptz{defaults}
  FROM unnest(%(platforms)s::text[], %(first_batches)s::int[], %(batch_limits)s::int[],
              %(first_targets)s::int[], %(target_counts)s::int[])
       WITH ORDINALITY AS p(platform, first_batch, batch_limit, first_target, targets, ord)
 CROSS JOIN LATERAL generate_series(0, p.targets * %(per_target)s - 1) AS k
"""


def expand_samples(
    *, run: Run, spec: CampaignSpec, revision_ids: list[int], in_sql: bool | None = None
) -> int:
    """Create the run's batches and write its samples into them. `in_sql` chooses the path
    (None: SQL on PostgreSQL, Python elsewhere; a test runs both). Returns the sample count."""
    sizes = batch_sizes(spec)
    batches = Batch.objects.bulk_create(
        Batch(run=run, index=i, platform=platform, size=size)
        for i, (platform, size) in enumerate(sizes)
    )
    # Higher priority work starts out as if it had been waiting longer; everything ages at
    # the same rate, so low priority work is delayed by a bounded amount, never starved.
    # (Read before the samples are written: a COPY runs no other query while it streams.)
    due_at = db_now() - timedelta(seconds=60 * spec.priority)
    if in_sql is None:
        in_sql = connection.vendor == "postgresql"
    if in_sql:
        return _insert_select(run, spec, revision_ids, batches, due_at)
    return copy_insert(Sample, sample_rows(run, spec, revision_ids, batches, due_at))


def _platforms(spec: CampaignSpec) -> list[str]:
    return list(dict.fromkeys(t.platform for t in spec.targets))


def planned_rows(
    spec: CampaignSpec, revision_ids: Sequence[int]
) -> Iterator[tuple[str, int, int, int]]:
    """(platform, target index, revision id, repeat) in plan order."""
    for platform in _platforms(spec):
        target_indexes = [i for i, t in enumerate(spec.targets) if t.platform == platform]
        for repeat in range(spec.repeats):
            for revision_id in revision_ids:
                for target_index in target_indexes:
                    yield platform, target_index, revision_id, repeat


def sample_rows(
    run: Run,
    spec: CampaignSpec,
    revision_ids: Sequence[int],
    batches: list[Batch],
    due_at: datetime,
) -> Iterator[dict[str, Any]]:
    """The samples as rows (attname -> value), in plan order: the Python path."""
    batch_iter = iter(batches)
    batch = next(batch_iter)
    filled = 0
    for platform, target_index, revision_id, repeat in planned_rows(spec, revision_ids):
        if filled == batch.size:
            batch, filled = next(batch_iter), 0
        target = spec.targets[target_index]
        filled += 1
        yield {
            "run_id": run.pk,
            "batch_id": batch.pk,
            "tenant_id": run.tenant_id,
            "question_revision_id": revision_id,
            "platform": platform,
            "device": target.device,
            "region": target.region,
            "mode": target.mode,
            "repeat_index": repeat,
            "priority": spec.priority,
            "due_at": due_at,
        }


def _insert_select(
    run: Run, spec: CampaignSpec, revision_ids: list[int], batches: list[Batch], due_at: datetime
) -> int:
    params: dict[str, Any] = {
        "run": run.pk,
        "tenant": run.tenant_id,
        "batch_ids": [b.pk for b in batches],
        "revision_ids": revision_ids,
        "questions": len(revision_ids),
        "per_target": len(revision_ids) * spec.repeats,
        "priority": spec.priority,
        "due_at": due_at,
        **_platform_arrays(spec, batches),
    }
    default_columns, default_sql = _defaults(params)
    columns = ", ".join(connection.ops.quote_name(c) for c in (*_COMPUTED, *default_columns))
    table = connection.ops.quote_name(Sample._meta.db_table)
    sql = f"INSERT INTO {table} ({columns})" + _SELECT.format(defaults=default_sql)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


def _platform_arrays(spec: CampaignSpec, batches: list[Batch]) -> dict[str, list[Any]]:
    """Per platform, in plan order: where its batches and its targets start, its batch limit
    and target count; and the targets' device, region and mode grouped by platform."""
    arrays: dict[str, list[Any]] = {
        key: []
        for key in (
            "platforms",
            "first_batches",
            "batch_limits",
            "first_targets",
            "target_counts",
            "devices",
            "regions",
            "modes",
        )
    }
    first_batch: dict[str, int] = {}
    for index, batch in enumerate(batches):
        first_batch.setdefault(batch.platform, index)
    for platform in _platforms(spec):
        targets = [t for t in spec.targets if t.platform == platform]
        arrays["platforms"].append(platform)
        arrays["first_batches"].append(first_batch[platform])
        arrays["batch_limits"].append(spec.submission_limits[platform])
        arrays["first_targets"].append(len(arrays["devices"]))
        arrays["target_counts"].append(len(targets))
        arrays["devices"] += [t.device for t in targets]
        arrays["regions"] += [t.region for t in targets]
        arrays["modes"] += [t.mode for t in targets]
    return arrays


def _defaults(params: dict[str, Any]) -> tuple[list[str], str]:
    """The columns the expansion does not compute, each with the model's default as a
    parameter (added to `params`); a column with only a database default is left out."""
    fields, defaults = column_defaults(Sample)
    columns: list[str] = []
    sql = ""
    for field in fields:
        value = defaults[field.attname]
        if field.attname in _COMPUTED or isinstance(value, DatabaseDefault):
            continue
        key = f"default_{field.attname}"
        params[key] = value
        columns.append(field.column)
        sql += f",\n       %({key})s::{field.db_type(connection)}"
    return columns, sql
