"""Database time. Leases, due times and ages compare against the database clock, never a
worker's, so a host with a skewed clock cannot steal or extend a lease."""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import connection


def now_sql() -> str:
    """Database time as SQL for a statement with parameters (`%` doubled), the same clock as
    Django's Now(): statement time on PostgreSQL, so a long transaction does not see time stand
    still; on SQLite UTC text, the shape timestamps are stored in."""
    if connection.vendor == "postgresql":
        return "statement_timestamp()"
    return "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')"


def db_now() -> datetime:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT statement_timestamp()")  # the clock of Django's Now()
            value: datetime = cursor.fetchone()[0]
            return value
        # SQLite: every process on the host shares this clock; stored timestamps are UTC text.
        cursor.execute("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')")
        return datetime.fromisoformat(cursor.fetchone()[0]).replace(tzinfo=UTC)
