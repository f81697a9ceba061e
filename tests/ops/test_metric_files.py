"""A full filesystem under PROMETHEUS_MULTIPROC_DIR costs metrics, never the process: the
files are allocated before they are mapped (geo_collect/metric_files.py), so a full disk is an
error the process logs once, not a SIGBUS.

The full filesystem is a real one: a 256 KiB tmpfs mounted for the test (the tests run as
root). Where mounting is not permitted, the allocation is made to fail with a file-size limit
(RLIMIT_FSIZE) instead, which reaches the same code path by another errno (EFBIG)."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from geo_collect.processes import ROOT

RECORD_MANY_SERIES = """
import django
django.setup()
from geo_collect import metric_files, metrics
for i in range(3000):
    metrics.RETRIES.labels(f"platform-{i}", "submit", "connect").inc()
    metrics.STEP_DURATION.labels(f"platform-{i}", "submit", "ok").observe(0.1)
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
registry = CollectorRegistry()
MultiProcessCollector(registry)
scraped = generate_latest(registry).decode()
recorded = scraped.count("geo_retries_total{")
print("recorded", recorded, "unrecorded", metric_files.unrecorded_count())
"""

WITHOUT_THE_GUARD = """
from prometheus_client import Counter
counter = Counter("x", "x", ["i"])
for i in range(3000):
    counter.labels(str(i)).inc()
"""


@contextlib.contextmanager
def full_filesystem(tmp_path: Path) -> Iterator[tuple[Path, Callable[[], None] | None]]:
    """A metrics folder with (almost) no room left, and what the child must do first."""
    folder = tmp_path / "metrics"
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(folder)], capture_output=True
    )
    if mounted.returncode != 0:
        yield folder, _file_size_limit
        return
    try:
        with open(folder / "filler", "wb") as filler:  # leave room for a file or two
            filler.write(b"\0" * (256 - 100) * 1024)
        yield folder, None
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def _file_size_limit() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a signal
    resource.setrlimit(resource.RLIMIT_FSIZE, (70_000, 70_000))


def _run(
    script: str, folder: Path, preexec: Callable[[], None] | None
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PROMETHEUS_MULTIPROC_DIR": str(folder),
        "DJANGO_SETTINGS_MODULE": "geo_collect.settings",
        "GEO_LOG_FORMAT": "text",
    }
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=preexec,
    )


def test_a_process_with_a_full_metrics_filesystem_goes_on_and_logs_it_once(
    tmp_path: Path,
) -> None:
    with full_filesystem(tmp_path) as (folder, preexec):
        done = _run(RECORD_MANY_SERIES, folder, preexec)

    assert done.returncode == 0, done.stderr[-3000:]
    recorded, unrecorded = (int(w) for w in done.stdout.split()[1::2])
    assert 0 < recorded < 3000  # the series that had room, and /metrics still reads the files
    assert unrecorded > 0
    assert done.stderr.count("metrics not recorded: no room") == 1, done.stderr[-3000:]


def test_without_the_allocation_a_full_metrics_filesystem_kills_with_sigbus(
    tmp_path: Path,
) -> None:
    """What the guard is for: prometheus_client alone on the same full filesystem."""
    with full_filesystem(tmp_path) as (folder, preexec):
        if preexec is not None:
            pytest.fail("tmpfs could not be mounted: the SIGBUS cannot be shown here")
        died = _run(WITHOUT_THE_GUARD, folder, None)
    assert died.returncode == -signal.SIGBUS
