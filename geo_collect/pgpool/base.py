"""Django's PostgreSQL backend with `geo_collect.pgpool.base.ConnectionPool` as its pool."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from django.db.backends.base.base import NO_DB_ALIAS
from django.db.backends.postgresql import base as postgresql
from psycopg.pq import TransactionStatus


class PoolTimeout(psycopg.OperationalError):
    """Every connection of the pool stayed in use for the whole timeout."""


class ConnectionPool:
    """At most `max_size` connections, opened on demand and kept open; a thread asking for one
    while all are out waits up to `timeout` seconds. A connection comes back idle and in
    autocommit (an open transaction is rolled back); a broken one is closed and replaced.

    The subset of psycopg_pool.ConnectionPool Django's backend calls: open, getconn, putconn,
    close."""

    def __init__(
        self,
        *,
        kwargs: dict[str, Any],
        configure: Callable[[psycopg.Connection[Any]], Any] | None = None,
        max_size: int = 10,
        timeout: float = 30.0,
    ) -> None:
        self.kwargs = kwargs
        self.configure = configure
        self.max_size = max_size
        self.timeout = timeout
        self._idle: list[psycopg.Connection[Any]] = []
        self._opened = 0
        self._ready = threading.Condition()

    def open(self) -> None:
        """Connections are opened on demand."""

    def getconn(self) -> psycopg.Connection[Any]:
        deadline = time.monotonic() + self.timeout
        with self._ready:
            while True:
                if self._idle:
                    return self._idle.pop()  # the most recently used: warm caches
                if self._opened < self.max_size:
                    self._opened += 1
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PoolTimeout(
                        f"no database connection free for {self.timeout:g}s "
                        f"({self.max_size} in use; GEO_WORKER_DB_POOL)"
                    )
                self._ready.wait(left)
        try:
            conn = psycopg.Connection.connect(**self.kwargs)
            if self.configure is not None:
                self.configure(conn)
        except BaseException:
            self._forget()
            raise
        conn._pool = self  # Django gives it back through `_pool`
        return conn

    def putconn(self, conn: psycopg.Connection[Any]) -> None:
        if not self._reusable(conn):
            with contextlib.suppress(Exception):
                conn.close()
            self._forget()
            return
        with self._ready:
            self._idle.append(conn)
            self._ready.notify()

    def close(self) -> None:
        with self._ready:
            idle, self._idle = self._idle, []
            self._opened -= len(idle)
        for conn in idle:
            with contextlib.suppress(Exception):
                conn.close()

    @staticmethod
    def _reusable(conn: psycopg.Connection[Any]) -> bool:
        if conn.closed:
            return False
        status = conn.info.transaction_status
        try:
            if status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
                conn.rollback()
            elif status != TransactionStatus.IDLE:  # mid-query or broken
                return False
            if not conn.autocommit:
                conn.autocommit = True
        except psycopg.Error:
            return False
        return True

    def _forget(self) -> None:
        with self._ready:
            self._opened -= 1
            self._ready.notify()


_POOLS: dict[str, ConnectionPool] = {}  # per alias, for the process


class DatabaseWrapper(postgresql.DatabaseWrapper):
    @property
    def pool(self) -> ConnectionPool | None:
        options = self.settings_dict["OPTIONS"].get("pool")
        if self.alias == NO_DB_ALIAS or not options:
            return None
        if self.alias not in _POOLS:
            connect_kwargs = self.get_connection_params()
            connect_kwargs["autocommit"] = True  # Django sets it as it wants on each checkout
            pool = ConnectionPool(
                kwargs=connect_kwargs,
                configure=getattr(self, "_configure_connection"),  # noqa: B009  (not in the stubs)
                **({} if options is True else options),
            )
            # Threads racing here build a pool each; the first stored wins (none is open yet).
            _POOLS.setdefault(self.alias, pool)
        return _POOLS[self.alias]

    def close_pool(self) -> None:
        pool = _POOLS.pop(self.alias, None)
        if pool is not None:
            pool.close()
