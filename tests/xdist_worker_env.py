"""Per-worker services when the suite runs in parallel (pytest-xdist, `make test` runs `-n 2`).

Loaded with `-p tests.xdist_worker_env` (pyproject addopts), before pytest-django reads the
settings. pytest-django already gives each xdist worker its own test database
(`test_<name>_gw0`, ...). This module gives each its own Redis database (the broker and the
cache: REDIS_URL's database number plus the worker's index) and its own Prometheus
multiprocess folder, so the worker processes one test starts never share a queue or a metrics
file with another test running at the same time. In a serial run it changes nothing.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

REDIS_DATABASES = 16  # Redis's default `databases`


def worker_index() -> int | None:
    """0 for xdist's gw0, 1 for gw1, ...; None outside a parallel run."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker.removeprefix("gw")) if worker.startswith("gw") else None


def redis_url_for_worker(url: str, index: int) -> str:
    """`url` with its database number moved on by `index` (redis://h:6379/5 -> /6 for gw1)."""
    parts = urlsplit(url)
    base = int(parts.path.strip("/") or 0)
    database = base + index
    if database >= REDIS_DATABASES:
        raise pytest.UsageError(
            f"REDIS_URL {url}: xdist worker {index} would need Redis database {database}; "
            f"use a lower database number or fewer workers (Redis has {REDIS_DATABASES})"
        )
    return urlunsplit(parts._replace(path=f"/{database}"))


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> Generator[None, None, None]:
    index = worker_index()
    if index is not None:
        if os.environ.get("REDIS_URL"):
            os.environ["REDIS_URL"] = redis_url_for_worker(os.environ["REDIS_URL"], index)
        var = os.environ.get("GEO_VAR_DIR") or Path(__file__).resolve().parent.parent / "var"
        metrics = Path(var) / f"metrics-gw{index}"
        metrics.mkdir(parents=True, exist_ok=True)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics)
    return (yield)
