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

from collections.abc import Callable, Iterable, Sequence
from functools import cache
from typing import Any, TypeVar

from django.db import connection
from django.db.models import Field, Model
from django.db.models.expressions import DatabaseDefault
from django.db.models.sql import UpdateQuery

M = TypeVar("M", bound=Model)


def insert_rows(objs: Sequence[M], *, ignore_conflicts: bool = False) -> Sequence[M]:
    """INSERT new model instances in one statement and set their primary keys, like
    `bulk_create` (no signals, no `save()` overrides). Every instance must leave the same
    columns to their database default. `ignore_conflicts`: rows that would break a unique
    constraint are skipped (ON CONFLICT DO NOTHING) and the instances' keys are not set."""
    if not objs:
        return objs
    model = type(objs[0])
    if connection.vendor != "postgresql":
        return model._default_manager.bulk_create(objs, ignore_conflicts=ignore_conflicts)
    fields = _insert_fields(model, objs[0])
    params: list[Any] = []
    for obj in objs:
        for field in fields:
            value = field.pre_save(obj, True)
            if isinstance(value, DatabaseDefault):
                raise ValueError(f"{model.__name__}.{field.name}: mixed database defaults")
            params.append(field.get_db_prep_save(value, connection))
    pk = model._meta.pk
    assert pk is not None
    # Like the ORM, read back what the database filled in: the key and database defaults.
    returned = [pk, *(f for f in model._meta.concrete_fields if f not in fields and f is not pk)]
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    sql = (
        f"INSERT INTO {_quote(model._meta.db_table)} "
        f"({', '.join(_quote(f.column) for f in fields)}) "
        f"VALUES {', '.join([row] * len(objs))} "
    )
    with connection.cursor() as cursor:
        if ignore_conflicts:
            cursor.execute(sql + "ON CONFLICT DO NOTHING", params)
            return objs
        cursor.execute(sql + f"RETURNING {', '.join(_quote(f.column) for f in returned)}", params)
        rows = cursor.fetchall()
    for obj, values in zip(objs, rows, strict=True):
        for field, value in zip(returned, values, strict=True):
            setattr(obj, field.attname, value)
        obj._state.adding = False
        obj._state.db = connection.alias
    return objs


def update_row(
    obj: Model,
    field_names: Iterable[str],
    *,
    values: dict[str, Any] | None = None,
    where: dict[str, Any] | None = None,
) -> int:
    """UPDATE the named fields of `obj`'s row with its values, and the fields in `values` with
    those, only if the columns in `where` hold the given values; returns the row count, for the
    caller's conditional-write check. Values may be expressions, such as `Now()`."""
    model = type(obj)
    meta = model._meta
    changes = {name: getattr(obj, _field(model, name).attname) for name in field_names}
    changes.update(values or {})
    if connection.vendor != "postgresql":
        return model._default_manager.filter(pk=obj.pk, **(where or {})).update(**changes)
    query = UpdateQuery(model)
    compiler = query.get_compiler(connection=connection)
    assignments: list[str] = []
    params: list[Any] = []
    for name, value in changes.items():
        field = _field(model, name)
        if hasattr(value, "resolve_expression"):
            resolved = value.resolve_expression(query, allow_joins=False, for_save=True)
            expression_sql, expression_params = compiler.compile(resolved)
            assignments.append(f"{_quote(field.column)} = {expression_sql}")
            params.extend(expression_params)
        else:
            assignments.append(f"{_quote(field.column)} = %s")
            params.append(field.get_db_prep_save(value, connection))
    pk = meta.pk
    assert pk is not None
    conditions = [f"{_quote(pk.column)} = %s"]
    params.append(obj.pk)
    for name, value in (where or {}).items():
        field = _field(model, name)
        conditions.append(f"{_quote(field.column)} = %s")
        params.append(field.get_db_prep_value(value, connection))
    sql = (
        f"UPDATE {_quote(meta.db_table)} SET {', '.join(assignments)} "
        f"WHERE {' AND '.join(conditions)}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


def columns(model: type[Model], alias: str) -> str:
    """The model's columns, in its field order, for a SELECT whose rows `from_row` reads."""
    return ", ".join(f"{alias}.{_quote(f.column)}" for f in model._meta.concrete_fields)


def from_row(model: type[M], row: Sequence[Any]) -> M:
    """A model instance from the leading `columns(model, ...)` values of a row (as the ORM
    builds it: `Model.from_db`, after the fields' converters)."""
    values = list(row[: len(model._meta.concrete_fields)])
    for index, column, converters in _converters(model, connection.vendor):
        for convert in converters:
            values[index] = convert(values[index], column, connection)
    return model.from_db(connection.alias, None, values)  # type: ignore[arg-type]


@cache
def _converters(model: type[Model], vendor: str) -> list[tuple[int, Any, list[Callable[..., Any]]]]:
    """Per column that has any: its index, its column expression and its converters."""
    found = []
    for index, field in enumerate(model._meta.concrete_fields):
        column = field.get_col(model._meta.db_table)
        converters = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
        if converters:
            found.append((index, column, converters))
    return found


def _insert_fields(model: type[Model], first: Model) -> list[Field[Any, Any]]:
    """The columns an INSERT names: every concrete field but an automatic primary key and
    those left to their database default."""
    fields = []
    for field in model._meta.concrete_fields:
        if field.primary_key and getattr(first, field.attname) is None:
            continue  # AutoField / BigAutoField: the database numbers the row
        if isinstance(getattr(first, field.attname), DatabaseDefault):
            continue
        fields.append(field)
    return fields


def _field(model: type[Model], name: str) -> Field[Any, Any]:
    field = model._meta.get_field(name)
    assert isinstance(field, Field), f"{model.__name__}.{name} is not a column"
    return field


def _quote(name: str) -> str:
    return connection.ops.quote_name(name)
