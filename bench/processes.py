"""What a benchmark needs around the product's own processes (geo_collect/processes.py): a
throw-away PostgreSQL database, a private redis-server, the simulator in its own process, and
the CPU time a process (and its descendants) has used, from /proc."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from geo_collect.processes import redis_answers, redis_server_command

ROOT = Path(__file__).resolve().parent.parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def database_url(name: str) -> str:
    """DATABASE_URL with its database replaced by `name` (PostgreSQL only)."""
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/geo_collect")
    parts = urlsplit(base)
    if parts.scheme not in ("postgres", "postgresql"):
        sys.exit("this benchmark needs PostgreSQL: set DATABASE_URL")
    return urlunsplit(parts._replace(path=f"/{name}"))


def fresh_database(name: str) -> str:
    """Drop and create database `name`; returns its URL."""
    import psycopg

    url = database_url(name)
    admin = urlunsplit(urlsplit(url)._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return url


@dataclass(frozen=True)
class ProcStat:
    own: float  # utime + stime, seconds, all threads
    reaped: float  # cutime + cstime: children it has waited for
    started: int  # start time in clock ticks since boot: with the pid, identifies a process
    parent: int


def proc_stat(pid: int) -> ProcStat | None:
    """From /proc/<pid>/stat; None when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text.rsplit(")", 1)[1].split()  # fields[0] is field 3 of proc(5), the state
    return ProcStat(
        own=(int(fields[11]) + int(fields[12])) / CLOCK_TICKS,
        reaped=(int(fields[13]) + int(fields[14])) / CLOCK_TICKS,
        started=int(fields[19]),
        parent=int(fields[1]),
    )


def children(pid: int) -> list[int]:
    """Live children of `pid`, forked by any of its threads."""
    out: list[int] = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return out
    for task in tasks:
        try:
            out += [int(child) for child in (task / "children").read_text().split()]
        except FileNotFoundError:
            continue
    return out


def tree_cpu_seconds(pid: int) -> float:
    """CPU of a process and all its descendants: its own, the children it reaped (cutime +
    cstime) and its live children's trees. 0 when it is gone."""
    stat = proc_stat(pid)
    if stat is None:
        return 0.0
    return stat.own + stat.reaped + sum(tree_cpu_seconds(child) for child in children(pid))


class Background:
    """A child process with its output in a log file; stopped by its own pid."""

    def __init__(self, command: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        with open(log, "ab") as out:
            self.popen = subprocess.Popen(
                command,
                cwd=ROOT,
                env={**os.environ, **(env or {})},
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stop(self, timeout: float = 20.0) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=timeout)


def start_redis(work: Path) -> tuple[Background, str]:
    """A private redis-server (no persistence) on a free port, and its URL."""
    port = free_port()
    server = Background(redis_server_command(port=port, directory=work), work / "redis.log")
    if redis_answers(port, seconds=10):
        return server, f"redis://127.0.0.1:{port}/0"
    server.stop()
    raise RuntimeError("redis-server did not start")


def start_simulator(
    work: Path, profile: dict[str, Any], *, seed: int = 3
) -> tuple[Background, str]:
    """`manage.py simulator` with `profile` in its own process, and its base URL."""
    port = free_port()
    path = work / "simulator-profile.json"
    path.write_text(json.dumps(profile))
    command = [sys.executable, "manage.py", "simulator", "--port", str(port),
               "--seed", str(seed), "--profile", str(path)]  # fmt: skip
    server = Background(command, work / "simulator.log")
    base = f"http://127.0.0.1:{port}"
    for _ in range(900):  # Django's start-up on a loaded machine
        try:
            with urllib.request.urlopen(f"{base}/_sim/health", timeout=5):  # noqa: S310 (http)
                return server, base
        except OSError:
            time.sleep(0.1)
    server.stop()
    raise RuntimeError("simulator did not start")
