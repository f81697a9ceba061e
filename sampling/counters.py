"""Sample counters that cannot drift (docs/decisions.md, "Sample counters maintained
by triggers").

`sampling_samplecount` holds, per (run, platform, shard), how many of the run's samples are in
each status bucket and each layer state. Database triggers on `sampling_sample` keep it: every
write path (fenced writes, bulk updates, planning inserts, deletes, raw SQL) moves the counters
in the same transaction as the sample rows, so a crash cannot separate them.

* PostgreSQL: statement-level AFTER INSERT / UPDATE / DELETE triggers with transition tables
  sum the statement's delta per (run, platform) and upsert one row in the shard
  `pg_backend_pid() % SHARDS`, so concurrent transactions mostly touch different rows
  (no single hot row per run).
* SQLite (the embedded demo default): row-level triggers, shard 0. A table rebuild by a later
  migration drops them, so `install` runs again after every migrate (sampling/apps.py).

Reads (`counts_by_platform`) sum the shards: O(platforms x SHARDS) rows per run, whatever N.
The full scan stays as the cross-check (pipeline/invariants.py `check_counters`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast
from uuid import UUID

from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper

from . import buckets
from .plainsql import cursor as plain_cursor

SHARDS = 16
TABLE = "sampling_samplecount"
SAMPLE_TABLE = "sampling_sample"
RUN_TABLE = "sampling_run"

# Status buckets as SQL over one sample row (`{t}` is the row's alias), from their one
# definition (sampling/buckets.py). Pending is not a column: samples minus terminal.
_COUNTED = (buckets.SUCCEEDED, buckets.FAILED, buckets.INVALID, buckets.REVIEW)
BUCKET_SQL: dict[str, str] = {
    "samples": "1 = 1",
    **{bucket.name: bucket.sql("{t}") for bucket in _COUNTED},
    "terminal": buckets.TERMINAL.sql("{t}"),
    "parked": buckets.PARKED.sql("{t}"),
}

LAYER_STATES: dict[str, tuple[str, ...]] = {
    "submission": ("planned", "submitting", "accepted", "uncertain"),
    "collection": ("queued", "running", "completed", "failed"),
    "evidence": ("pending", "stored", "partial", "failed"),
    "analysis": ("pending", "accepted", "review", "failed"),
}
LAYER_PREFIX = {"submission": "sub", "collection": "col", "evidence": "ev", "analysis": "an"}


def layer_column(layer: str, state: str) -> str:
    return f"{LAYER_PREFIX[layer]}_{state}"


def _column_predicates() -> dict[str, str]:
    columns = dict(BUCKET_SQL)
    for layer, states in LAYER_STATES.items():
        for state in states:
            columns[layer_column(layer, state)] = f"{{t}}.{layer}_state = '{state}'"
    return columns


COLUMN_SQL: dict[str, str] = _column_predicates()
COLUMNS: tuple[str, ...] = tuple(COLUMN_SQL)
# The sample columns whose change can move a counter.
WATCHED = (
    "run_id",
    "platform",
    "queue_state",
    "validity",
    "submission_state",
    "collection_state",
    "evidence_state",
    "analysis_state",
)


# --- installing the triggers ----------------------------------------------------------------


def _case(column: str, alias: str) -> str:
    return f"CASE WHEN {COLUMN_SQL[column].format(t=alias)} THEN 1 ELSE 0 END"


def _upsert_set(target: str) -> str:
    return ", ".join(f"{c} = {target}.{c} + EXCLUDED.{c}" for c in COLUMNS)


def _postgresql_function() -> str:
    sums = ", ".join(f"SUM(d.sign * ({_case(c, 'd')})) AS {c}" for c in COLUMNS)
    nonzero = " OR ".join(f"SUM(d.sign * ({_case(c, 'd')})) <> 0" for c in COLUMNS)
    columns = ", ".join(COLUMNS)
    delta = (
        f"INSERT INTO {TABLE} AS c (run_id, platform, shard, {columns}) "
        f"SELECT d.run_id, d.platform, pg_backend_pid() % {SHARDS}, {sums} "
        "FROM ({source}) d GROUP BY d.run_id, d.platform "
        f"HAVING {nonzero} ORDER BY d.run_id, d.platform "
        f"ON CONFLICT (run_id, platform, shard) DO UPDATE SET {_upsert_set('c')};"
    )
    added = delta.format(source="SELECT 1 AS sign, * FROM new_rows")
    removed = delta.format(source="SELECT -1 AS sign, * FROM old_rows")
    changed = delta.format(
        source="SELECT 1 AS sign, * FROM new_rows UNION ALL SELECT -1 AS sign, * FROM old_rows"
    )
    return f"""
CREATE OR REPLACE FUNCTION {TABLE}_delta() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    {added}
  ELSIF TG_OP = 'DELETE' THEN
    {removed}
  ELSE
    {changed}
  END IF;
  RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION {TABLE}_forget_run() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM {TABLE} WHERE run_id IN (SELECT id FROM old_rows);
  RETURN NULL;
END $$;
"""


def _postgresql_triggers() -> list[str]:
    statements = [_postgresql_function()]
    for op, referencing in (
        ("INSERT", "NEW TABLE AS new_rows"),
        ("UPDATE", "OLD TABLE AS old_rows NEW TABLE AS new_rows"),
        ("DELETE", "OLD TABLE AS old_rows"),
    ):
        name = f"{TABLE}_{op.lower()}"
        statements.append(f"DROP TRIGGER IF EXISTS {name} ON {SAMPLE_TABLE}")
        statements.append(
            f"CREATE TRIGGER {name} AFTER {op} ON {SAMPLE_TABLE} REFERENCING {referencing} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {TABLE}_delta()"
        )
    statements.append(f"DROP TRIGGER IF EXISTS {TABLE}_run_delete ON {RUN_TABLE}")
    statements.append(
        f"CREATE TRIGGER {TABLE}_run_delete AFTER DELETE ON {RUN_TABLE} "
        f"REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT "
        f"EXECUTE FUNCTION {TABLE}_forget_run()"
    )
    return statements


def _sqlite_upsert(alias: str, sign: int) -> str:
    values = ", ".join(f"{sign} * ({_case(c, alias)})" for c in COLUMNS)
    return (
        f"INSERT INTO {TABLE} (run_id, platform, shard, {', '.join(COLUMNS)}) "
        f"VALUES ({alias}.run_id, {alias}.platform, 0, {values}) "
        f"ON CONFLICT (run_id, platform, shard) DO UPDATE SET "
        + ", ".join(f"{c} = {c} + excluded.{c}" for c in COLUMNS)
        + ";"
    )


def _sqlite_triggers() -> list[str]:
    changed = " OR ".join(f"OLD.{c} IS NOT NEW.{c}" for c in WATCHED)
    bodies = {
        "insert": ("AFTER INSERT", _sqlite_upsert("NEW", 1)),
        "update": (
            f"AFTER UPDATE ON {SAMPLE_TABLE} FOR EACH ROW WHEN {changed}",
            _sqlite_upsert("OLD", -1) + " " + _sqlite_upsert("NEW", 1),
        ),
        "delete": ("AFTER DELETE", _sqlite_upsert("OLD", -1)),
    }
    statements = []
    for op, (when, body) in bodies.items():
        name = f"{TABLE}_{op}"
        head = when if " ON " in when else f"{when} ON {SAMPLE_TABLE} FOR EACH ROW"
        statements.append(f"DROP TRIGGER IF EXISTS {name}")
        statements.append(f"CREATE TRIGGER {name} {head} BEGIN {body} END")
    statements.append(f"DROP TRIGGER IF EXISTS {TABLE}_run_delete")
    statements.append(
        f"CREATE TRIGGER {TABLE}_run_delete AFTER DELETE ON {RUN_TABLE} FOR EACH ROW "
        f"BEGIN DELETE FROM {TABLE} WHERE run_id = OLD.id; END"
    )
    return statements


def trigger_statements(vendor: str) -> list[str]:
    return _postgresql_triggers() if vendor == "postgresql" else _sqlite_triggers()


def install(conn: BaseDatabaseWrapper | None = None) -> None:
    """(Re)create the triggers; idempotent."""
    conn = conn or connection
    with conn.cursor() as cursor:
        for statement in trigger_statements(conn.vendor):
            cursor.execute(statement)


def rebuild(conn: BaseDatabaseWrapper | None = None) -> None:
    """Recount every run from its samples into shard 0 (the migration's backfill; also the
    repair after an operator found a drift with check_invariants)."""
    conn = conn or connection
    columns = ", ".join(COLUMNS)
    sums = ", ".join(f"SUM({_case(c, 's')})" for c in COLUMNS)
    with conn.cursor() as cursor:
        cursor.execute(f"DELETE FROM {TABLE}")
        cursor.execute(
            f"INSERT INTO {TABLE} (run_id, platform, shard, {columns}) "
            f"SELECT s.run_id, s.platform, 0, {sums} FROM {SAMPLE_TABLE} s "
            "GROUP BY s.run_id, s.platform"
        )


# --- reading ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Counts:
    """One run's (or one platform's) counters, summed over shards."""

    values: dict[str, int]

    def __getitem__(self, column: str) -> int:
        return self.values.get(column, 0)

    def layers(self) -> dict[str, dict[str, int]]:
        """Per layer, the states that have samples (as a GROUP BY would list them)."""
        out: dict[str, dict[str, int]] = {}
        for layer, states in LAYER_STATES.items():
            found = {s: self[layer_column(layer, s)] for s in states}
            out[layer] = {s: n for s, n in sorted(found.items()) if n}
        return out


def _counts(values: Iterable[object]) -> Counts:
    return Counts(dict(zip(COLUMNS, (int(cast(int, v)) for v in values), strict=True)))


def _summed(where: str, params: Iterable[Any], group: str) -> list[tuple[object, ...]]:
    sums = ", ".join(f"COALESCE(SUM({c}), 0)" for c in COLUMNS)
    select_group = f"{group}, " if group else ""
    group_by = f" GROUP BY {group} ORDER BY {group}" if group else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {select_group}{sums} FROM {TABLE} WHERE {where}{group_by}", list(params)
        )
        return list(cursor.fetchall())


def run_param(run_id: UUID | str) -> Any:
    value = UUID(str(run_id))
    return value if connection.vendor == "postgresql" else value.hex


def run_counts(*, run_id: UUID | str) -> Counts:
    (row,) = _summed("run_id = %s", [run_param(run_id)], "")
    return _counts(row)


def open_samples(*, run_id: UUID | str) -> int:
    """How many of the run's samples are not terminal yet (queue state other than done): one
    read of the run's counter rows, where a scan for an open sample would read every done
    sample before it (all of them, near a large run's end)."""
    with plain_cursor() as cursor:  # prepared: after every sample's last step
        cursor.execute(
            f"SELECT COALESCE(SUM(samples - terminal), 0) FROM {TABLE} WHERE run_id = %s",
            [run_param(run_id)],
        )
        (open_count,) = cursor.fetchone()
    return int(open_count)


def counts_by_platform(*, run_id: UUID | str) -> dict[str, Counts]:
    rows = _summed("run_id = %s", [run_param(run_id)], "platform")
    return {
        str(row[0]): _counts(row[1:])
        for row in rows
        if row[1]  # a platform whose samples were all deleted
    }


def counts_by_run(*, run_ids: list[UUID]) -> dict[UUID, Counts]:
    if not run_ids:
        return {}
    marks = ", ".join(["%s"] * len(run_ids))
    rows = _summed(f"run_id IN ({marks})", [run_param(r) for r in run_ids], "run_id")
    out = {}
    for row in rows:
        run_id = row[0] if isinstance(row[0], UUID) else UUID(str(row[0]))
        out[run_id] = _counts(row[1:])
    return out


def scan(*, where: str, params: list[Any], group: str) -> dict[str, Counts]:
    """The same counters computed by scanning sample rows (`s`) that match `where`, per value
    of the column `group`: the batch status and the cross-check (pipeline/invariants.py)."""
    sums = ", ".join(f"SUM({_case(c, 's')})" for c in COLUMNS)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT s.{group}, {sums} FROM {SAMPLE_TABLE} s WHERE {where} "
            f"GROUP BY s.{group} ORDER BY s.{group}",
            params,
        )
        rows = cursor.fetchall()
    return {str(row[0]): _counts(row[1:]) for row in rows}


def scanned_by_batch(*, batch_ids: list[int]) -> dict[str, Counts]:
    if not batch_ids:
        return {}
    marks = ", ".join(["%s"] * len(batch_ids))
    return scan(where=f"s.batch_id IN ({marks})", params=list(batch_ids), group="batch_id")


# --- the cross-check -------------------------------------------------------------------------


@dataclass(frozen=True)
class Drift:
    """A counter that differs from a scan of the samples it counts."""

    run_id: str
    platform: str
    column: str
    counter: int
    scanned: int

    def __str__(self) -> str:
        return (
            f"run {self.run_id} platform {self.platform}: counter {TABLE}.{self.column} = "
            f"{self.counter}, scan of the samples = {self.scanned} "
            f"(difference {self.counter - self.scanned:+d})"
        )


def drift(*, run_id: UUID | str | None = None) -> list[Drift]:
    """Every (run, platform, column) whose counters (summed over shards) differ from a full
    scan of sampling_sample, for one run or all. Empty: the counters are exact."""
    where_s, where_c, params = "", "", list[Any]()
    if run_id is not None:
        where_s, where_c = "WHERE s.run_id = %s", "WHERE c.run_id = %s"
        params = [run_param(run_id)] * 2
    scanned = ", ".join(f"SUM({_case(c, 's')}) AS {c}" for c in COLUMNS)
    counted = ", ".join(f"SUM(c.{c}) AS {c}" for c in COLUMNS)
    pairs = ", ".join(f"COALESCE(k.{c}, 0), COALESCE(v.{c}, 0)" for c in COLUMNS)
    sql = (
        f"WITH k AS (SELECT c.run_id, c.platform, {counted} FROM {TABLE} c {where_c} "
        "GROUP BY c.run_id, c.platform), "
        f"v AS (SELECT s.run_id, s.platform, {scanned} FROM {SAMPLE_TABLE} s {where_s} "
        "GROUP BY s.run_id, s.platform) "
        f"SELECT COALESCE(k.run_id, v.run_id), COALESCE(k.platform, v.platform), {pairs} "
        "FROM k FULL OUTER JOIN v ON k.run_id = v.run_id AND k.platform = v.platform "
        "ORDER BY 1, 2"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    found = []
    for row in rows:
        values = row[2:]
        for index, column in enumerate(COLUMNS):
            counter, scanned_n = int(values[2 * index]), int(values[2 * index + 1])
            if counter != scanned_n:
                run = row[0] if isinstance(row[0], UUID) else UUID(str(row[0]))
                found.append(Drift(str(run), str(row[1]), column, counter, scanned_n))
    return found
