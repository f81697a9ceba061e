"""The worker's connection pool (settings GEO_WORKER_DB_POOL: Django's pooling with
psycopg_pool): threads share a few PostgreSQL connections, wait for one when all are out, and
always get one back clean."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.backends.postgresql.base import DatabaseWrapper
from psycopg_pool import ConnectionPool, PoolTimeout

from geo_collect import settings as project_settings

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL backend"),
]


@pytest.fixture
def wrapper() -> Iterator[DatabaseWrapper]:
    """A Django connection to the test database through a pool of two, as a worker's."""
    settings_dict = {
        **connection.settings_dict,
        "CONN_MAX_AGE": 0,
        "OPTIONS": {"pool": {"min_size": 1, "max_size": 2, "timeout": 0.3}},
    }
    wrapper = DatabaseWrapper(settings_dict, alias="pool-test")
    yield wrapper
    wrapper.close()
    wrapper.close_pool()


def opened_pool(wrapper: DatabaseWrapper) -> ConnectionPool:
    """The wrapper's pool, open with its connections made (Django opens it lazily)."""
    pool = wrapper.pool
    assert pool is not None
    pool.open(wait=True)
    return pool


def _backend_pid(wrapper: DatabaseWrapper) -> int:
    with wrapper.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid: int = cursor.fetchone()[0]
    return pid


def test_a_closed_django_connection_goes_back_to_the_pool_and_is_reused(
    wrapper: DatabaseWrapper,
) -> None:
    opened_pool(wrapper)  # its first connection made, so no checkout waits on a slow start
    pids = []
    for _ in range(6):
        pids.append(_backend_pid(wrapper))
        wrapper.close()
        assert wrapper.connection is None

    # Six checkouts, at most the pool's two PostgreSQL sessions: closing gave them back.
    assert len(set(pids)) <= 2, pids


def test_a_connection_given_back_mid_transaction_comes_back_rolled_back(
    wrapper: DatabaseWrapper,
) -> None:
    pool = opened_pool(wrapper)
    conn = pool.getconn()
    conn.autocommit = False
    conn.execute("CREATE TEMPORARY TABLE left_open (x int)")
    pool.putconn(conn)

    again = pool.getconn()
    assert again.execute("SELECT to_regclass('left_open')").fetchone() == (None,)
    pool.putconn(again)


def test_a_thread_waits_for_a_free_connection_and_times_out_when_none_comes(
    wrapper: DatabaseWrapper,
) -> None:
    pool = opened_pool(wrapper)
    held = [pool.getconn(), pool.getconn()]

    with pytest.raises(PoolTimeout):
        pool.getconn()

    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(pool.getconn(timeout=5)))
    waiter.start()
    pool.putconn(held.pop())
    waiter.join(timeout=5)
    assert got and not got[0].closed
    for conn in [*held, *got]:
        pool.putconn(conn)


def test_a_broken_connection_is_replaced(wrapper: DatabaseWrapper) -> None:
    pool = opened_pool(wrapper)
    conn = pool.getconn()
    conn.close()
    pool.putconn(conn)

    fresh = [pool.getconn(timeout=5), pool.getconn(timeout=5)]  # both slots usable again
    assert all(not c.closed for c in fresh) and conn not in fresh
    for c in fresh:
        pool.putconn(c)


def test_only_celery_workers_use_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    for argv, worker in [
        (["/venv/lib/python3.11/site-packages/celery/__main__.py", "-A", "x", "worker"], True),
        (["/venv/bin/celery", "-A", "geo_collect", "worker", "-P", "threads"], True),
        (["manage.py", "dispatcher", "--interval", "0.3"], False),
        (["/venv/bin/celery", "-A", "geo_collect", "inspect", "ping"], False),
    ]:
        monkeypatch.setattr(sys, "argv", argv)
        assert project_settings._celery_worker() is worker, argv


def test_without_the_pool_option_a_connection_has_no_pool() -> None:
    plain = {**connection.settings_dict, "OPTIONS": {}}
    assert DatabaseWrapper(plain, alias="no-pool").pool is None
