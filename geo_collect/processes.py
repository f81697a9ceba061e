"""Starting and stopping real Celery worker processes (demo, end-to-end tests, chaos runs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from django.conf import settings

from connectors.registry import known_platforms

ALL_QUEUES: tuple[str, ...] = (
    *(f"platform.{p}" for p in known_platforms()),
    "evidence",
    "analysis",
    "default",
)


def start_worker(
    *,
    queues: Sequence[str] = ALL_QUEUES,
    concurrency: int = 8,
    env: dict[str, str] | None = None,
    name: str = "worker",
    log_path: Path | None = None,
) -> subprocess.Popen[bytes]:
    """A `celery worker` child process consuming `queues`, with a thread pool: the work is
    I/O bound (upstream HTTP, storage), so threads give concurrency without more memory."""
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "geo_collect",
        "worker",
        "-Q",
        ",".join(queues),
        "-P",
        "threads",
        "-c",
        str(concurrency),
        "-n",
        f"{name}-{os.getpid()}@%h",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-l",
        "WARNING",
    ]
    child_env = {**os.environ, **(env or {})}
    output = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
    return subprocess.Popen(
        command, cwd=settings.BASE_DIR, env=child_env, stdout=output, stderr=subprocess.STDOUT
    )


def stop_worker(process: subprocess.Popen[bytes], *, timeout: float = 20.0) -> None:
    """Warm shutdown (finish the current tasks), then kill if it does not exit in time."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout)
