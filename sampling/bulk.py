"""Fast bulk insert for plan expansion.

On PostgreSQL rows go through COPY: a 100,000-sample plan is one stream instead of thousands
of parameterised INSERTs. Values not given take the model field's own default, so the model
stays the one place that defines them. Elsewhere (SQLite) it falls back to bulk_create.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.db import connection
from django.db.models import Model
from django.utils import timezone


def column_defaults(model: type[Model]) -> tuple[list[Any], dict[str, Any]]:
    """The columns a COPY writes (every concrete field but the key) and each one's default
    (attname -> value; `auto_now` fields: now)."""
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    now = timezone.now()
    defaults = {
        f.attname: (now if getattr(f, "auto_now", False) else f.get_default()) for f in fields
    }
    return fields, defaults


def copy_insert(model: type[Model], rows: Iterable[Mapping[str, Any]], *, chunk: int = 5000) -> int:
    """Insert `rows` (attname -> value) into `model`'s table. Returns the row count."""
    if connection.vendor != "postgresql":
        return _bulk_create(model, rows, chunk)
    fields, defaults = column_defaults(model)
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    count = 0
    with connection.cursor() as cursor:
        copy_sql = f"COPY {connection.ops.quote_name(model._meta.db_table)} ({columns}) FROM STDIN"
        with cursor.cursor.copy(copy_sql) as copy:
            for row in rows:
                copy.write_row([row.get(f.attname, defaults[f.attname]) for f in fields])
                count += 1
    return count


def _bulk_create(model: type[Model], rows: Iterable[Mapping[str, Any]], chunk: int) -> int:
    count = 0
    batch: list[Model] = []
    for row in rows:
        batch.append(model(**row))
        if len(batch) >= chunk:
            model._default_manager.bulk_create(batch)
            count, batch = count + len(batch), []
    model._default_manager.bulk_create(batch)
    return count + len(batch)
