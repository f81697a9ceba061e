"""Readiness: can this process do its work right now? Each check answers quickly and says
what is wrong; none writes anything."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.core.files.storage import storages
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from geo_collect.celery import app
from geo_collect.db_outage import answers

BROKER_TIMEOUT_SECONDS = 3


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str = ""


def database() -> str:
    """The database answers now. A connection that broke while the database restarted is
    replaced first (geo_collect/db_outage.py): the answer is about the database, not about a
    connection it dropped."""
    if not answers():
        with connection.cursor() as cursor:  # a fresh connection: its error says what is wrong
            cursor.execute("SELECT 1")
    return connection.vendor


def migrations() -> str:
    executor = MigrationExecutor(connection)
    pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if pending:
        names = ", ".join(f"{m.app_label}.{m.name}" for m, _ in pending[:5])
        raise RuntimeError(f"{len(pending)} migrations not applied ({names})")
    return "all applied"


def broker() -> str:
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT_SECONDS)
        return str(conn.transport_cls)


def storage() -> str:
    store = storages["default"]
    store.exists("healthcheck/probe")  # a metadata read: reachable and allowed
    return type(store).__name__


CHECKS: dict[str, Callable[[], str]] = {
    "database": database,
    "migrations": migrations,
    "broker": broker,
    "storage": storage,
}


def readiness() -> list[Check]:
    results = []
    for name, check in CHECKS.items():
        try:
            results.append(Check(name, True, check()))
        except Exception as error:  # a check failing is the answer
            results.append(Check(name, False, f"{type(error).__name__}: {error}"[:300]))
    return results
