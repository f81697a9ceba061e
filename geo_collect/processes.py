"""Starting, stopping and supervising the project's own processes: Celery workers and the
dispatcher. The one place that knows how a worker is started; the demo, the end-to-end and
durability tests, the chaos harness and `manage.py supervise` (production) all come here.

A supervisor restarts a child that died (and says so), and gives up with the children's last
log lines when the work it watches stops moving for a bounded time, instead of waiting out a
long timeout on a dead process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import redis

from connectors.platforms import worker_queues

ROOT = Path(__file__).resolve().parent.parent

# Every queue the deployment publishes to (connectors/platforms.py).
ALL_QUEUES: tuple[str, ...] = worker_queues()


def worker_command(
    *,
    name: str,
    queues: Iterable[str] = ALL_QUEUES,
    concurrency: int = 8,
    loglevel: str = "WARNING",
) -> list[str]:
    """`celery worker` on a thread pool: the work is I/O bound (upstream HTTP, storage), so
    threads give concurrency without more memory. `name` is the full node name (`x@host`)."""
    return [
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
        name,
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
        "-l",
        loglevel,
    ]


def dispatcher_command(*, interval: float = 0.3, extra: Sequence[str] = ()) -> list[str]:
    return [sys.executable, "manage.py", "dispatcher", "--interval", str(interval), *extra]


def redis_server_command(*, port: int, directory: Path, logfile: Path | None = None) -> list[str]:
    """A throwaway `redis-server` on loopback (the broker-loss test, the chaos harness): it
    keeps nothing on disk, so killing it loses every queued message."""
    command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", str(directory)]  # fmt: skip
    return [*command, "--logfile", str(logfile)] if logfile is not None else command


def redis_answers(port: int, *, seconds: float = 5.0, pause: float = 0.05) -> bool:
    """Whether the redis-server on loopback `port` answers PING within `seconds`."""
    client = redis.Redis(port=port)
    deadline = time.monotonic() + seconds
    while True:
        try:
            if client.ping():
                return True
        except redis.ConnectionError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)


@dataclass
class ManagedProcess:
    """One child process: started (and restarted) with the same command and environment,
    its output appended to one log file."""

    name: str
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    log_path: Path | None = None
    popen: subprocess.Popen[bytes] | None = None
    starts: int = 0
    started_at: float = 0.0

    def start(self, extra_env: dict[str, str] | None = None) -> ManagedProcess:
        self.starts += 1
        self.started_at = time.monotonic()
        child_env = {**os.environ, **self.env, **(extra_env or {})}
        if self.log_path is None:
            self.popen = subprocess.Popen(self.command, cwd=ROOT, env=child_env)
            return self
        with open(self.log_path, "ab") as out:
            out.write(f"\n===== start {self.starts} {extra_env or ''}\n".encode())
            out.flush()
            self.popen = subprocess.Popen(
                self.command, cwd=ROOT, env=child_env, stdout=out, stderr=subprocess.STDOUT
            )
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None, f"{self.name} was never started"
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return None if self.popen is None else self.popen.poll()

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        if self.alive():
            assert self.popen is not None
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(timeout=30)

    def terminate(self) -> None:
        """Ask for a warm shutdown (a worker finishes its current tasks) without waiting."""
        if self.alive():
            assert self.popen is not None
            os.kill(self.popen.pid, signal.SIGCONT)  # a paused process cannot act on SIGTERM
            self.popen.terminate()

    def stop(self, timeout: float = 20.0) -> None:
        """Warm shutdown, then kill if it does not exit in time."""
        if not self.alive():
            return
        assert self.popen is not None
        self.terminate()
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout=timeout)

    def text(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.text().splitlines()[-lines:])


def start_worker(
    *,
    queues: Sequence[str] = ALL_QUEUES,
    concurrency: int = 8,
    env: dict[str, str] | None = None,
    name: str = "worker",
    log_path: Path | None = None,
    loglevel: str = "WARNING",
) -> ManagedProcess:
    """A started worker process named `name-<our pid>@<host>`."""
    command = worker_command(
        name=f"{name}-{os.getpid()}@%h", queues=queues, concurrency=concurrency, loglevel=loglevel
    )
    return ManagedProcess(name, command, env or {}, log_path).start()


def stop_worker(process: ManagedProcess, *, timeout: float = 20.0) -> None:
    process.stop(timeout=timeout)


def stop_all(processes: Iterable[ManagedProcess], *, timeout: float = 20.0) -> None:
    """Ask every process to stop first, then wait for each: they shut down in parallel."""
    processes = list(processes)
    for process in processes:
        process.terminate()
    for process in processes:
        process.stop(timeout=timeout)


class Stalled(Exception):
    """The supervised work made no progress for too long; the message has the logs."""


@dataclass
class Supervisor:
    """Keeps children alive and notices when the work stops moving.

    `tick()` restarts every child that exited (and reports it through `say`), and raises
    `Stalled` when the value last passed to `progress()` has not changed for `stall_seconds`.
    """

    children: list[ManagedProcess]
    stall_seconds: float = 120.0
    say: Callable[[str], None] = print
    on_restart: Callable[[ManagedProcess], None] | None = None
    clock: Callable[[], float] = time.monotonic
    restarts: int = 0
    _marker: Hashable = None
    _moved_at: float = 0.0

    def __post_init__(self) -> None:
        self._moved_at = self.clock()

    def start(self) -> None:
        for child in self.children:
            child.start()
            self.say(f"started {child.name} (pid {child.pid})")
        self._moved_at = self.clock()

    def tick(self) -> None:
        for child in self.children:
            if child.popen is not None and not child.alive():
                code = child.returncode
                child.start()
                self.restarts += 1
                self.say(f"{child.name} exited with {code}; restarted (pid {child.pid})")
                if self.on_restart is not None:
                    self.on_restart(child)
        if self.clock() - self._moved_at > self.stall_seconds:
            raise Stalled(self.report(f"no progress for {self.stall_seconds:.0f}s"))

    def progress(self, marker: Hashable) -> None:
        if marker != self._marker:
            self._marker, self._moved_at = marker, self.clock()

    def report(self, headline: str, *, lines: int = 20) -> str:
        parts = [headline]
        for child in self.children:
            where = f" ({child.log_path})" if child.log_path else ""
            parts.append(f"--- last {lines} lines of {child.name}{where}:\n{child.tail(lines)}")
        return "\n".join(parts)

    def stop(self) -> None:
        stop_all(self.children)

    def run_until(
        self, check: Callable[[], tuple[bool, Hashable]], *, timeout: float, interval: float = 0.5
    ) -> bool:
        """Tick until `check()` says done (True), the timeout passes (False) or the work
        stalls (Stalled). `check` returns (done, a marker that changes when work moves)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.tick()
            done, marker = check()
            self.progress(marker)
            if done:
                return True
            time.sleep(interval)
        return False

    def run_forever(self, *, interval: float = 1.0) -> None:
        """Production use (`manage.py supervise`): restart on exit, never judge progress."""
        self.stall_seconds = float("inf")
        # systemd and honcho stop us with SIGTERM: stop the children warmly on the way out.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        self.start()
        try:
            while True:
                time.sleep(interval)
                self.tick()
        finally:
            self.stop()


# The demo's one worker has `threads` threads; the dispatcher leases little more than that at a
# time, and for long: a lease starts at the claim, not when the worker takes the message, and
# on a loaded machine a claim can wait in the queue for minutes; a lease that ran out there is
# wasted work. A long lease costs the demo nothing: when its only worker dies, the supervisor
# ends every lease at once (demo.py), and a hang is caught by the stall limit.
DEMO_ENV = {
    "GEO_LEASE_SECONDS": "900",
    "GEO_PLATFORM_CONCURRENCY": "2",
    "GEO_EVIDENCE_CONCURRENCY": "4",
    "GEO_ANALYSIS_CONCURRENCY": "4",
}


def demo_supervisor(
    *,
    threads: int,
    stall_seconds: float,
    env: dict[str, str],
    say: Callable[[str], None],
    on_restart: Callable[[ManagedProcess], None],
) -> Supervisor:
    """`manage.py demo`'s children: one worker on every queue and the dispatcher, logging to
    the var folder (GEO_VAR_DIR)."""
    from django.conf import settings

    env = {**DEMO_ENV, **env}
    var = Path(settings.VAR_DIR)
    worker = ManagedProcess(
        "worker",
        worker_command(name=f"demo-{os.getpid()}@%h", concurrency=threads),
        env,
        var / "demo-worker.log",
    )
    dispatcher = ManagedProcess(
        "dispatcher", dispatcher_command(), env, var / "demo-dispatcher.log"
    )
    return Supervisor(
        [worker, dispatcher], stall_seconds=stall_seconds, say=say, on_restart=on_restart
    )
