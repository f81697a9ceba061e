"""Real services the test directories share: the upstream simulator on loopback, the Redis
broker emptied around a test, the test database's URL for subprocesses, and small HTTP
servers on loopback (webhook receivers, proxies, canaries, hostile upstreams)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer
from typing import Any

import pytest
import redis
from django.db import connection

from simulator import SimulatorHandle, start_simulator


@contextmanager
def upstream_simulator(settings: Any, *, seed: int, **options: Any) -> Iterator[SimulatorHandle]:
    """The simulator on loopback, with the pipeline's upstream base URL pointing at it."""
    handle = start_simulator(seed=seed, **options)
    settings.GEO_UPSTREAM_BASE_URL = handle.base_url
    try:
        yield handle
    finally:
        handle.stop()


def simulator_fixture(*, seed: int, **options: Any) -> Callable[..., Iterator[SimulatorHandle]]:
    """A function-scoped fixture yielding `upstream_simulator(settings, seed=seed, ...)`; assign
    it to the fixture's name in a conftest or test module."""

    @pytest.fixture
    def fixture(settings: Any) -> Iterator[SimulatorHandle]:
        with upstream_simulator(settings, seed=seed, **options) as handle:
            yield handle

    return fixture


def broker_url(tests: str) -> str:
    """The broker the worker subprocesses share with the test (REDIS_URL), or a failure that
    says where it comes from."""
    url = os.environ.get("REDIS_URL")
    if not url:
        pytest.fail(f"{tests} need REDIS_URL (make test sets it)")
    return url


@contextmanager
def empty_broker(url: str) -> Iterator[redis.Redis]:
    """The broker's database emptied before and after: messages an earlier, interrupted test
    left name rows that are gone."""
    client = redis.Redis.from_url(url)
    client.flushdb()
    try:
        yield client
    finally:
        client.flushdb()


def database_url() -> str:
    """The test database, as a DATABASE_URL for a subprocess (a worker, manage.py)."""
    db = connection.settings_dict
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgres://{db['USER']}{password}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler for a loopback test server: no access log on the test's output."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def read_body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def reply(self, status: int) -> None:
        """A response with no body."""
        self.send_response(status)
        self.end_headers()


@contextmanager
def loopback_server(
    handler: type[BaseHTTPRequestHandler], *, threaded: bool = True
) -> Iterator[str]:
    """`handler` served on 127.0.0.1 (a free port) from a daemon thread, one thread a request
    when `threaded`, else one request at a time. Yields the base URL."""
    server = (ThreadingHTTPServer if threaded else HTTPServer)(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
