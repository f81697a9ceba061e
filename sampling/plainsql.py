"""The rows a step reads and writes, as plain SELECT, INSERT and UPDATE statements.

A worker writes about twenty rows per collected sample, each inside the fenced transaction of
its step. Through the ORM each statement costs more CPU in query building and compilation
than in the database (docs/decisions.md, "A step's writes skip the ORM's compiler"). These
helpers write the same rows with the same values: each value still goes through its field's
`pre_save` and `get_db_prep_save`, expressions (`Now()`) are compiled by the ORM's own
compiler, and columns with a database default are left to the database; rows read come back
through the fields' database converters. Only the statement text is assembled here, from the
model's metadata.

Writes are PostgreSQL only (multi-row VALUES with RETURNING); on SQLite, the embedded default
of a single host, they fall back to the ORM. Reads work on both.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from functools import cache, lru_cache
from typing import Any, TypeVar

import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.models import Field, Model
from django.db.models.expressions import DatabaseDefault
from django.db.models.sql import UpdateQuery
from psycopg._queries import PostgresQuery, _query2pg_nocache

M = TypeVar("M", bound=Model)


def cursor() -> CursorWrapper:
    """A cursor for the statements every step runs. On PostgreSQL its statements are bound on
    the server and prepared on their connection the first time they run: PostgreSQL parses and
    plans each text once per connection, then only binds and executes it (planning cost about
    5 ms of PostgreSQL's CPU per collected sample: docs/decisions.md, "Step statements
    prepared for real"). The texts are few (built from the models, no values in them); psycopg
    keeps the newest 100 per connection. Elsewhere, or with GEO_DB_PREPARED_STATEMENTS=0, the
    connection's usual cursor. Statements go through the connection's execute wrappers either
    way."""
    db = _db()
    if db.vendor != "postgresql" or not settings.GEO_DB_PREPARED_STATEMENTS:
        return db.cursor()
    db.ensure_connection()
    with db.wrap_database_errors:
        raw = _PreparedCursor(db.connection)
        _same_timezone(db, raw)
        # The wrapper `db.cursor()` puts around the cursors it makes (execute wrappers, errors).
        return db._prepare_cursor(raw)  # type: ignore[attr-defined]


class _KnownQuery(PostgresQuery):
    """A statement's placeholders turned into PostgreSQL's (`%s` -> `$1`), remembered per text
    whatever its length. psycopg remembers only texts under 4 KiB with at most 50 parameters,
    so every `write_if` statement was split and rewritten anew on each execution (a tenth of
    a worker's CPU per answer). The texts here are built from the models, never from values,
    and come in few shapes, so the cache stays small and its hits high."""

    def convert(self, query: Any, vars: Any) -> None:
        if vars is None or not isinstance(query, str | bytes):
            super().convert(query, vars)
            return
        self.query, self._want_formats, self._order, self._parts = _placeholders(
            self._ensure_bytes(query), self._tx.encoding
        )
        self.dump(vars)


_placeholders = lru_cache(maxsize=256)(_query2pg_nocache)


class _PreparedCursor(psycopg.Cursor[Any]):
    """A server-binding cursor whose statements are prepared (Django's connections have
    psycopg's automatic preparation off: `prepare_threshold` None; the settings give a
    threshold, without which psycopg would prepare nothing)."""

    _query_cls = _KnownQuery

    def _send_query_prepared(
        self, name: bytes, pgq: PostgresQuery, *, binary: bool | None = None
    ) -> None:
        # As an unprepared execution leaves it: what Django shows as the statement sent (query
        # logs with DEBUG, the tests' statement counts) is read from it.
        self._query = pgq
        super()._send_query_prepared(name, pgq, binary=binary)

    def execute(self, query: Any, params: Any = None, *, prepare: bool | None = None,
                binary: bool | None = None) -> Any:  # fmt: skip
        return super().execute(
            query, params, prepare=True if prepare is None else prepare, binary=binary
        )


def _same_timezone(db: BaseDatabaseWrapper, raw: psycopg.Cursor[Any]) -> None:
    """As Django's `create_cursor`: timestamps read in the connection's time zone."""
    from django.db.backends.postgresql.psycopg_any import (  # type: ignore[import-untyped]
        register_tzloader,
    )

    oid = psycopg.adapters.types["timestamptz"].oid
    loader = db.connection.adapters.get_loader(oid, psycopg.pq.Format.TEXT)
    if db.timezone != loader.timezone:
        register_tzloader(db.timezone, raw)


def _db() -> BaseDatabaseWrapper:
    """The thread's connection, looked up once per call: every attribute read through
    `django.db.connection` repeats a thread-local lookup."""
    return connections[DEFAULT_DB_ALIAS]


def insert_rows(objs: Sequence[M], *, ignore_conflicts: bool = False) -> Sequence[M]:
    """INSERT new model instances in one statement, set their primary keys and database
    defaults as `bulk_create` does (no signals, no `save()` overrides) and return them. Every
    instance must leave the same columns to their database default.

    `ignore_conflicts`: rows that would break a unique constraint are skipped (ON CONFLICT DO
    NOTHING). One instance comes back filled in if it was inserted, or not at all if it was
    skipped; of several, none are filled in (which were skipped is not known)."""
    if not objs:
        return objs
    db = _db()
    model = type(objs[0])
    if db.vendor != "postgresql":
        return model._default_manager.bulk_create(objs, ignore_conflicts=ignore_conflicts)
    plan = _insert_plan(model, _defaulted(model, objs[0]))
    rows = []
    for obj in objs:
        take_parent_keys(obj)  # a row built before the one it points at was inserted
        rows.append(_cells(plan, obj, parents=False))
    arrays = len(objs) > 1 and plan.arrays is not None
    if arrays:  # one text whatever the number of rows
        sql, params = plan.head_select + plan.unnest, [list(c) for c in zip(*rows, strict=True)]
    else:
        sql, params = plan.head + ", ".join([plan.row] * len(objs)), [v for r in rows for v in r]
    if ignore_conflicts:
        sql += " ON CONFLICT DO NOTHING"
    # A text per number of rows is not worth preparing: Django's cursor, unprepared.
    with cursor() if len(objs) == 1 or arrays else db.cursor() as cur:
        if ignore_conflicts and len(objs) > 1:
            cur.execute(sql, params)
            return objs
        cur.execute(sql + plan.returning, params)
        returned = cur.fetchall()
    if not returned:
        return []  # the one instance was skipped
    for obj, values in zip(objs, returned, strict=True):
        for field, value in zip(plan.returned, values, strict=True):
            setattr(obj, field.attname, value)
        obj._state.adding = False
        obj._state.db = db.alias
    return objs


class _InsertPlan:
    """The text of a model's INSERT for one set of columns, built once per process."""

    def __init__(self, model: type[Model], defaulted: frozenset[str]) -> None:
        meta = model._meta
        pk = meta.pk
        assert pk is not None
        quote = _quote
        self.fields = [f for f in meta.concrete_fields if f.attname not in defaulted]
        # Like the ORM, read back what the database filled in: the key and database defaults.
        self.returned = [
            pk,
            *(f for f in meta.concrete_fields if f.attname in defaulted and f is not pk),
        ]
        self.head = (
            f"INSERT INTO {quote(meta.db_table)} "
            f"({', '.join(quote(f.column) for f in self.fields)}) VALUES "
        )
        self.row = "(" + ", ".join(["%s"] * len(self.fields)) + ")"
        # Each value cast to its column's type, for a row given as a SELECT list or a VALUES
        # row (`write_if`): a parameter there has no column to take its type from. Without a
        # length (an explicit cast to varchar(n) would cut a longer value instead of refusing
        # it).
        self.casts = [f"%s::{_base_type(f)}" for f in self.fields]
        self.returning = f" RETURNING {', '.join(quote(f.column) for f in self.returned)}"
        self.head_select = self.head.removesuffix(" VALUES ") + " "
        # Many rows given as one array per column, as Django's `bulk_create` does on
        # PostgreSQL: the statement's text is the same whatever the number of rows, so it is
        # converted, parsed and planned once. None if a column's type cannot be an array's.
        self.arrays = _array_casts(self.fields)
        self.unnest = f"SELECT * FROM UNNEST({', '.join(self.arrays or [])})"


def _array_casts(fields: Sequence[Field[Any, Any]]) -> list[str] | None:
    """Each column's parameter as an array of its type; None if one cannot be (the test
    Django's own UNNEST insert applies)."""
    db = connections[DEFAULT_DB_ALIAS]
    for field in fields:
        target = getattr(field, "target_field", field)  # a foreign key: its target's type
        if hasattr(field, "get_placeholder") or target.get_internal_type() not in db.data_types:
            return None
    return [f"%s::{_base_type(f)}[]" for f in fields]


def _base_type(field: Field[Any, Any]) -> str:
    return re.sub(r"\(.*\)", "", field.db_type(connections[DEFAULT_DB_ALIAS]) or "")


@cache
def _insert_plan(model: type[Model], defaulted: frozenset[str]) -> _InsertPlan:
    return _InsertPlan(model, defaulted)


def _defaulted(model: type[Model], first: Model) -> frozenset[str]:
    """The columns the database fills in: an automatic primary key left empty, and those left
    to their database default."""
    pk = model._meta.pk
    assert pk is not None
    return frozenset(
        f.attname
        for f in model._meta.concrete_fields
        if (f is pk and getattr(first, f.attname) is None)
        or isinstance(getattr(first, f.attname), DatabaseDefault)
    )


# --- changed fields, computed ---------------------------------------------------------------

_SEEN = "_plainsql_seen"  # where `track` keeps an instance's values, in its __dict__


@cache
def _attnames(model: type[Model]) -> tuple[str, ...]:
    pk = _pk(model)
    return tuple(f.attname for f in model._meta.concrete_fields if f is not pk)


def track(obj: Model) -> None:
    """Remember `obj`'s field values as they are now (as read under its row lock, or as just
    inserted): `changed_fields` then names the fields assigned a different value since, so a
    write names exactly those (as HackSoft's `model_update`), never a hand-kept list."""
    values = obj.__dict__
    values[_SEEN] = {name: values.get(name) for name in _attnames(type(obj))}


def tracked(obj: Model) -> bool:
    return _SEEN in obj.__dict__


def remembered(obj: Model) -> dict[str, Any] | None:
    """What `track` remembers of `obj` now, to be restored should the transaction that
    writes it roll back (`restore`)."""
    seen = obj.__dict__.get(_SEEN)
    return None if seen is None else dict(seen)


def restore(obj: Model, seen: dict[str, Any] | None) -> None:
    """Forget the writes of a rolled-back transaction: `update_changed` remembered them as
    stored, so a retry with the same instance would leave them out (a field assigned the value
    it had in the rolled-back write would not count as changed)."""
    if seen is None:
        obj.__dict__.pop(_SEEN, None)
    else:
        obj.__dict__[_SEEN] = dict(seen)


def reset(obj: Model) -> None:
    """`obj`'s fields back to the values `track` remembered: changes made since, never
    written, undone."""
    obj.__dict__.update(obj.__dict__[_SEEN])


def seen(obj: Model, name: str) -> Any:
    """A field's value when `track` was last called."""
    return obj.__dict__[_SEEN][name]


def changed_fields(obj: Model) -> list[str]:
    """The fields of `obj` whose values differ from those `track` remembered (an expression
    such as `Now()` always differs)."""
    before: dict[str, Any] = obj.__dict__[_SEEN]
    values = obj.__dict__
    return [name for name, value in before.items() if values.get(name) != value]


def update_changed(
    obj: Model, *, values: dict[str, Any] | None = None, where: dict[str, Any] | None = None
) -> int:
    """UPDATE the fields changed since `track(obj)` (and those in `values`), as `update_row`;
    then remember the row as written. Fields written as expressions (`Now()`) read their
    values back in the same statement, so the instance holds what the database stored."""
    changed = changed_fields(obj)
    if not changed and not values:
        return 1  # nothing to write: the row is as the instance says
    returning = [name for name in changed if _is_expression(getattr(obj, name))]
    returning += [name for name, value in (values or {}).items() if _is_expression(value)]
    updated = update_row(obj, changed, values=values, where=where, returning=returning)
    track(obj)
    return updated


def _is_expression(value: Any) -> bool:
    return hasattr(value, "resolve_expression")


def update_row(
    obj: Model,
    field_names: Iterable[str],
    *,
    values: dict[str, Any] | None = None,
    where: dict[str, Any] | None = None,
    returning: Sequence[str] = (),
) -> int:
    """UPDATE the named fields of `obj`'s row with its values, and the fields in `values` with
    those, only if the columns in `where` hold the given values; returns the row count, for the
    caller's conditional-write check. Values may be expressions, such as `Now()`; the fields
    named in `returning` are read back from the row written and set on `obj`."""
    db = _db()
    changes = {name: getattr(obj, _field(type(obj), name).attname) for name in field_names}
    changes.update(values or {})
    if db.vendor != "postgresql":
        return _update_with_orm(obj, changes, where or {}, returning)
    sql, params = _update_sql(obj, changes, where or {})
    if returning:
        sql += (
            f" RETURNING {', '.join(_quote(_field(type(obj), name).column) for name in returning)}"
        )
    with cursor() as cur:
        cur.execute(sql, params)
        if returning and cur.rowcount == 1:
            _set_returned(obj, returning, cur.fetchone())
        return int(cur.rowcount)


def _update_sql(
    obj: Model, changes: dict[str, Any], where: dict[str, Any], condition: str = ""
) -> tuple[str, list[Any]]:
    """The UPDATE of `changes` on `obj`'s row if the columns in `where` hold their values (and
    `condition`, SQL without parameters): its text and parameters."""
    db = _db()
    model = type(obj)
    assignments: list[str] = []
    params: list[Any] = []
    for name, value in changes.items():
        field = _field(model, name)
        if hasattr(value, "resolve_expression"):
            expression_sql, expression_params = _expression_sql(model, value)
            assignments.append(f"{_quote(field.column)} = {expression_sql}")
            params.extend(expression_params)
        else:
            assignments.append(f"{_quote(field.column)} = %s")
            params.append(field.get_db_prep_save(value, db))
    conditions = [f"{_quote(_pk(model).column)} = %s"]
    params.append(obj.pk)
    for name, value in where.items():
        field = _field(model, name)
        conditions.append(f"{_quote(field.column)} = %s")
        params.append(field.get_db_prep_value(value, db))
    if condition:
        conditions.append(condition)
    sql = (
        f"UPDATE {_quote(model._meta.db_table)} SET {', '.join(assignments)} "
        f"WHERE {' AND '.join(conditions)}"
    )
    return sql, params


# --- several writes in one statement, if the first one matched --------------------------------


def write_if(
    guard: Model,
    *,
    where: dict[str, Any],
    condition: str = "",
    values: dict[str, Any] | None = None,
    then_update: Sequence[Model] = (),
    then_insert: Sequence[Model] = (),
    then_delete: Sequence[Model] = (),
    skip_conflicts: Sequence[Model] = (),
) -> bool:
    """One statement, committed as one: UPDATE the fields of `guard` changed since `track`
    (and those in `values`) if the columns in `where` hold their values and `condition` holds
    (SQL without parameters); only if that matched, UPDATE the changed fields of each of
    `then_update`, INSERT `then_insert` (those also in `skip_conflicts` with ON CONFLICT DO
    NOTHING) and DELETE the rows of `then_delete`. A fenced transaction's lock, writes and
    commit in one round trip. PostgreSQL only (data-modifying WITH clauses).

    Rows to insert of one model go in one INSERT. A row may point at another row inserted
    here (its foreign key set to that unsaved instance, alone of its model): the key is taken
    from that row's INSERT. Returns whether the guard matched; then the updated instances, and
    those inserted alone of their model, hold what was stored, as `update_changed` and
    `insert_rows` leave them (several rows of one model are not read back). Nothing is written
    otherwise."""
    statement = _Statement()
    statement.update(guard, values or {}, where, condition)
    for obj in then_update:
        statement.update(obj, {}, {}, _IF_GUARD)
    statement.insert(then_insert, skip_conflicts)
    for obj in then_delete:
        table, pk = _quote(type(obj)._meta.db_table), _quote(_pk(type(obj)).column)
        statement.add(f"DELETE FROM {table} WHERE {pk} = %s AND {_IF_GUARD}", [obj.pk])
    with cursor() as cur:
        cur.execute(*statement.sql())
        row = cur.fetchone()
    if row is None:
        return False
    _read_back(row, statement.reads)
    for obj in then_insert:  # a key taken from a row inserted here, now known
        take_parent_keys(obj)
    return True


def take_parent_keys(obj: Model) -> None:
    """A foreign key set to an instance that had no key then, and has one now (saved since),
    takes that key, as the ORM's `save()` and `bulk_create()` do."""
    for field in _relations(type(obj)):
        if getattr(obj, field.attname) is None:
            parent = obj._state.fields_cache.get(field.name)
            if isinstance(parent, Model) and parent.pk is not None:
                setattr(obj, field.attname, parent.pk)


@cache
def _relations(model: type[Model]) -> tuple[Field[Any, Any], ...]:
    return tuple(f for f in model._meta.concrete_fields if f.is_relation)


_IF_GUARD = "EXISTS (SELECT 1 FROM w0)"


class _Statement:
    """The WITH clauses of `write_if`, `w0` the guard, and what each reads back."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.params: list[Any] = []
        self.reads: list[tuple[str, Model, list[Field[Any, Any]], bool]] = []

    def add(self, sql: str, params: Sequence[Any]) -> str:
        name = f"w{len(self.parts)}"
        self.parts.append(sql)
        self.params.extend(params)
        return name

    def update(self, obj: Model, extra: dict[str, Any], where: dict[str, Any], cond: str) -> None:
        changes = {name: getattr(obj, name) for name in changed_fields(obj)}
        changes.update(extra)
        sql, params = _update_sql(obj, changes, where, cond)
        expressions = [_field(type(obj), n) for n, v in changes.items() if _is_expression(v)]
        back = [_pk(type(obj)), *expressions]
        name = self.add(f"{sql} RETURNING {', '.join(_quote(f.column) for f in back)}", params)
        self.reads.append((name, obj, back, False))

    def insert(self, objs: Sequence[Model], skip_conflicts: Sequence[Model]) -> None:
        groups: dict[tuple[type[Model], frozenset[str], bool], list[Model]] = {}
        for obj in objs:
            skip = any(obj is other for other in skip_conflicts)
            groups.setdefault((type(obj), _defaulted(type(obj), obj), skip), []).append(obj)
        alone: dict[int, str] = {}  # id() of an instance inserted alone -> its clause
        for (model, defaulted, skip), rows in groups.items():
            plan = _insert_plan(model, defaulted)
            select = self._arrays(plan, rows, alone) if len(rows) > 1 else None
            if select is None:
                select = self._values(plan, rows, alone)
            sql = f"{plan.head_select}{select[0]} WHERE {_IF_GUARD}"
            sql += " ON CONFLICT DO NOTHING" if skip else ""
            if len(rows) == 1:
                name = self.add(sql + plan.returning, select[1])
                alone[id(rows[0])] = name
                self.reads.append((name, rows[0], plan.returned, True))
            else:
                self.add(sql, select[1])

    @staticmethod
    def _values(
        plan: _InsertPlan, rows: Sequence[Model], alone: dict[int, str]
    ) -> tuple[str, list[Any]]:
        """The rows as a VALUES list, each value cast to its column's type."""
        values, params = [], []
        for obj in rows:
            cells = []
            for cast, value in zip(plan.casts, _cells(plan, obj), strict=True):
                if isinstance(value, _Parent):
                    cells.append(_parent_key(value.row, alone))
                else:
                    cells.append(cast)
                    params.append(value)
            values.append(f"({', '.join(cells)})")
        return f"SELECT * FROM (VALUES {', '.join(values)}) AS v", params

    @staticmethod
    def _arrays(
        plan: _InsertPlan, rows: Sequence[Model], alone: dict[int, str]
    ) -> tuple[str, list[Any]] | None:
        """The rows as one array per column (UNNEST), so the text does not change with their
        number; a foreign key that every row sets to the same unsaved parent is that parent's
        key. None if a column cannot be an array, or the rows differ in unsaved parents."""
        if plan.arrays is None:
            return None
        columns = list(zip(*(_cells(plan, obj) for obj in rows), strict=True))
        picked, arrays, names, params = [], [], [], []
        for i, (cast, column) in enumerate(zip(plan.arrays, columns, strict=True)):
            parents = {id(c.row) for c in column if isinstance(c, _Parent)}
            if parents:  # the same unsaved parent for every row, or no array at all
                if len(parents) > 1 or not all(isinstance(c, _Parent) for c in column):
                    return None
                picked.append(_parent_key(column[0].row, alone))
                continue
            picked.append(f"v.c{i}")
            names.append(f"c{i}")
            arrays.append(cast)
            params.append(list(column))
        if not arrays:  # every column a parent's key: nothing to unnest
            return None
        unnest = f"UNNEST({', '.join(arrays)}) AS v({', '.join(names)})"
        return f"SELECT {', '.join(picked)} FROM {unnest}", params

    def sql(self) -> tuple[str, list[Any]]:
        clauses = ", ".join(f"w{i} AS ({part})" for i, part in enumerate(self.parts))
        read = [name for name, *_ in self.reads]
        joins = "".join(f" LEFT JOIN {name} ON true" for name in read[1:])
        columns = ", ".join(f"{name}.*" for name in read)
        return f"WITH {clauses} SELECT {columns} FROM w0{joins}", self.params


class _Parent:
    """A foreign key's value still to come: its unsaved parent, inserted in the statement."""

    __slots__ = ("row",)

    def __init__(self, row: Model) -> None:
        self.row = row


def _cells(plan: _InsertPlan, obj: Model, *, parents: bool = True) -> list[Any]:
    """`obj`'s values for the plan's columns, as the database takes them; `_Parent` for a key
    that comes from an unsaved parent inserted in the same statement (`parents`)."""
    db = _db()
    cells: list[Any] = []
    for field in plan.fields:
        parent = _unsaved_parent(obj, field)
        if parent is not None:
            if not parents:
                raise ValueError(f"{field}: points at a row not saved yet")
            cells.append(_Parent(parent))
            continue
        value = field.pre_save(obj, True)
        if isinstance(value, DatabaseDefault):
            raise ValueError(f"{type(obj).__name__}.{field.name}: mixed database defaults")
        cells.append(field.get_db_prep_save(value, db))
    return cells


def _parent_key(parent: Model, alone: dict[int, str]) -> str:
    """The key of an unsaved parent, from its row's INSERT earlier in the statement."""
    if id(parent) not in alone:
        raise ValueError(f"{type(parent).__name__}: its row is not inserted alone before this one")
    return f"(SELECT {_quote(_pk(type(parent)).column)} FROM {alone[id(parent)]})"


def _unsaved_parent(obj: Model, field: Field[Any, Any]) -> Model | None:
    """The related instance a foreign key of `obj` points at, if it has no key yet."""
    if not field.is_relation or getattr(obj, field.attname) is not None:
        return None
    parent = obj._state.fields_cache.get(field.name)
    return parent if isinstance(parent, Model) and parent.pk is None else None


def _read_back(
    row: Sequence[Any], reads: list[tuple[str, Model, list[Field[Any, Any]], bool]]
) -> None:
    """Each instance `write_if` reads back, as the database stored it, from its slice of the
    row."""
    db = _db()
    start = 0
    for _name, obj, fields, inserted in reads:
        values = row[start : start + len(fields)]
        start += len(fields)
        if not inserted:
            _set_returned(obj, [f.name for f in fields[1:]], values[1:])
            track(obj)
        elif values[0] is not None:  # None: skipped, it was already there
            for field, value in zip(fields, values, strict=True):
                setattr(obj, field.attname, value)
            obj._state.adding = False
            obj._state.db = db.alias


def _update_with_orm(
    obj: Model, changes: dict[str, Any], where: dict[str, Any], returning: Sequence[str]
) -> int:
    """SQLite, the embedded default: the ORM's UPDATE, and a read of what it wrote."""
    model = type(obj)
    rows = model._default_manager.filter(pk=obj.pk, **where)
    updated = rows.update(**changes) if changes else rows.count()
    if returning and updated == 1:
        names = [_field(model, name).attname for name in returning]
        row = model._default_manager.filter(pk=obj.pk).values_list(*names).get()
        for name, value in zip(names, row, strict=True):
            setattr(obj, name, value)
    return updated


def _set_returned(obj: Model, names: Sequence[str], row: Sequence[Any]) -> None:
    model = type(obj)
    values = converted(row, [(model, name) for name in names])
    for name, value in zip(names, values, strict=True):
        setattr(obj, _field(model, name).attname, value)


# Expressions without parameters compiled for an UPDATE, per model and expression: every
# write of a step sets a timestamp or two to `Now()`, whose text is the same every time
# (docs/decisions.md, "A step's writes skip the ORM's compiler"). Bounded: only expressions
# written in the code, never values, end up here.
_COMPILED: dict[tuple[type[Model], Any], str] = {}
_COMPILED_MAX = 256


def _expression_sql(model: type[Model], expression: Any) -> tuple[str, list[Any]]:
    """`expression` compiled for an UPDATE of `model`: its SQL and parameters."""
    key = (model, expression)
    try:
        return _COMPILED[key], []
    except (KeyError, TypeError):  # TypeError: an expression that cannot be hashed
        pass
    query = UpdateQuery(model)
    resolved = expression.resolve_expression(query, allow_joins=False, for_save=True)
    sql, params = query.get_compiler(connection=_db()).compile(resolved)
    if not params and len(_COMPILED) < _COMPILED_MAX:
        with suppress(TypeError):
            _COMPILED[key] = sql
    return sql, list(params)


@cache
def columns(model: type[Model], alias: str) -> str:
    """The model's columns, in its field order, for a SELECT whose rows `from_row` reads."""
    return ", ".join(f"{alias}.{_quote(f.column)}" for f in model._meta.concrete_fields)


def from_row(model: type[M], row: Sequence[Any]) -> M:
    """A model instance from the leading `columns(model, ...)` values of a row (as the ORM
    builds it: `Model.from_db`, after the fields' converters)."""
    db = _db()
    values = list(row[: len(model._meta.concrete_fields)])
    for index, column, converters in _converters(model, db.vendor):
        for convert in converters:
            values[index] = convert(values[index], column, db)
    return model.from_db(db.alias, None, values)  # type: ignore[arg-type]


def converted(row: Sequence[Any], fields: Sequence[tuple[type[Model], str]]) -> list[Any]:
    """The values of a row whose columns are these fields (model and field name, of any
    models), as the ORM reads them: after the fields' converters (on SQLite a timestamp,
    naive UTC or text, becomes an aware datetime, as PostgreSQL returns it). For a SELECT of a
    few columns of a join, where `from_row` would need every column of each model."""
    db = _db()
    values = list(row)
    for index, (model, name) in enumerate(fields):
        column, converters = _field_converters(model, name, db.vendor)
        for convert in converters:
            values[index] = convert(values[index], column, db)
    return values


@cache
def _converters(model: type[Model], vendor: str) -> list[tuple[int, Any, list[Callable[..., Any]]]]:
    """Per column that has any: its index, its column expression and its converters."""
    found = []
    for index, field in enumerate(model._meta.concrete_fields):
        column, converters = _field_converters(model, field.name, vendor)
        if converters:
            found.append((index, column, converters))
    return found


@cache
def _field_converters(
    model: type[Model], name: str, vendor: str
) -> tuple[Any, list[Callable[..., Any]]]:
    """A field's column expression and the converters the ORM applies to the values read."""
    db = _db()
    column = _field(model, name).get_col(model._meta.db_table)
    return column, db.ops.get_db_converters(column) + column.get_db_converters(db)


@cache
def _field(model: type[Model], name: str) -> Field[Any, Any]:
    field = model._meta.get_field(name)
    assert isinstance(field, Field), f"{model.__name__}.{name} is not a column"
    return field


def _pk(model: type[Model]) -> Field[Any, Any]:
    pk = model._meta.pk
    assert pk is not None
    return pk


@cache
def _quote(name: str) -> str:
    # Double quotes: PostgreSQL's identifiers (the plain statements' only database), and
    # also SQLite's, where `columns` is used.
    return _db().ops.quote_name(name)
