"""The CPU the PostgreSQL server spends for one benchmark database over a window, on a server
other users share (bench/collection.py).

PostgreSQL is one process per connection under the postmaster, plus its own background
processes. A thread reads, every `interval` seconds, the CPU of each child of the postmaster
from /proc (`<pid>/stat`: utime + stime, keyed by pid and start time so a reused pid is a new
process) and which database each serves (pg_stat_activity). At the end each process is counted
from its CPU at the start (0 if born later) to its last reading:

- `bench`: backends of the bench database, except the harness's own connections (its polling
  is measurement, not product work);
- `server`: the postmaster and the background processes that serve no one database (WAL
  writer, checkpointer, background writer, autovacuum launcher): work done for every database,
  so on a shared machine an upper bound of the bench's share;
- `other`: backends of other databases (other users' work; never counted for the bench);
- `harness`: the harness's connections;
- `unattributed`: the rest of the whole tree's growth (the postmaster's own CPU, its reaped
  children's cutime + cstime and its live children): CPU of processes after their last reading
  before they exited, or that lived and died between two readings, whoever they served.

`whole_tree` is the postmaster tree's growth, the figure to read on a quiet machine (where
everything the server did, it did for the bench).
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from bench.processes import children, proc_stat, tree_cpu_seconds

SERVER_TYPES = frozenset(
    {
        "checkpointer",
        "background writer",
        "walwriter",
        "autovacuum launcher",
        "logical replication launcher",
        "archiver",
        "startup",
        "walsender",
        "walreceiver",
    }
)


@dataclass
class _Seen:
    start: float  # CPU at the window's start, 0 if born during it
    last: float
    pid: int
    kind: str = "unattributed"


@dataclass
class PostgresShare:
    """Seconds of CPU over the window, by whom it served (module docstring)."""

    bench: float
    server: float
    other: float
    harness: float
    unattributed: float
    whole_tree: float
    bench_backends: int  # bench backends seen
    waits: Counter[str] = field(default_factory=Counter)
    polls: int = 0

    def waits_summary(self) -> str:
        n = max(1, self.polls)
        return ", ".join(f"{what} {count / n:.1f}" for what, count in self.waits.most_common(4))


class PostgresCPU:
    """`with PostgresCPU(dsn=..., database=..., harness={pid}) as pg: ...` then `pg.share`.

    `dsn` is any database of the server (its connection is counted as harness); `harness` the
    pids of the harness's other backends. The poll also counts what the bench database's busy
    sessions wait on (pg_stat_activity), as the detail line shows."""

    def __init__(
        self, *, dsn: str, database: str, harness: set[int], interval: float = 0.2
    ) -> None:
        self.dsn = dsn
        self.database = database
        self.harness = set(harness)
        self.interval = interval
        self.share: PostgresShare | None = None
        self._seen: dict[tuple[int, int], _Seen] = {}
        self._kind_of_pid: dict[int, str] = {}
        self._waits: Counter[str] = Counter()
        self._polls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> PostgresCPU:
        import psycopg

        self._conn: Any = psycopg.connect(self.dsn, autocommit=True)
        backend = self._conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        self.harness.add(backend)
        stat = proc_stat(backend)
        if stat is None:
            raise RuntimeError("PostgreSQL is not on this machine: its CPU cannot be read")
        self.postmaster = stat.parent
        self._postmaster_start = self._postmaster_own()
        self._tree_start = tree_cpu_seconds(self.postmaster)
        self._read(first=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._read(first=False)
        self._classify()
        self._conn.close()
        self.share = self._result()

    def _postmaster_own(self) -> float:
        stat = proc_stat(self.postmaster)
        return 0.0 if stat is None else stat.own

    def _read(self, *, first: bool) -> None:
        for pid in children(self.postmaster):
            stat = proc_stat(pid)
            if stat is None:
                continue
            cpu = stat.own + stat.reaped
            key = (pid, stat.started)
            if key in self._seen:
                self._seen[key].last = cpu
            else:  # there at the start, or born since (all its CPU is in the window)
                self._seen[key] = _Seen(start=cpu if first else 0.0, last=cpu, pid=pid)

    def _classify(self) -> None:
        rows = self._conn.execute(
            "SELECT pid, datname, backend_type, state,"
            " coalesce(wait_event_type || '/' || wait_event, state)"
            " FROM pg_stat_activity"
        ).fetchall()
        for pid, datname, backend_type, state, waiting in rows:
            if pid in self.harness:
                kind = "harness"
            elif datname == self.database:
                kind = "bench"
                if state not in (None, "idle") and backend_type == "client backend":
                    self._waits[waiting] += 1
            elif datname is None and backend_type in SERVER_TYPES:
                kind = "server"
            else:
                kind = "other"
            self._kind_of_pid[pid] = kind
        for seen in self._seen.values():
            seen.kind = self._kind_of_pid.get(seen.pid, seen.kind)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._read(first=False)
            self._classify()
            self._polls += 1

    def _result(self) -> PostgresShare:
        by_kind: Counter[str] = Counter()
        for seen in self._seen.values():
            by_kind[seen.kind] += seen.last - seen.start
        whole = tree_cpu_seconds(self.postmaster) - self._tree_start
        postmaster = self._postmaster_own() - self._postmaster_start
        # Exited children are in the postmaster's reaped time as a whole, not one by one: what
        # the readings do not explain of the tree's growth is unattributed.
        unattributed = max(0.0, whole - postmaster - sum(by_kind.values()))
        return PostgresShare(
            bench=by_kind["bench"],
            server=by_kind["server"] + postmaster,
            other=by_kind["other"],
            harness=by_kind["harness"],
            unattributed=unattributed + by_kind["unattributed"],
            whole_tree=whole,
            bench_backends=sum(1 for seen in self._seen.values() if seen.kind == "bench"),
            waits=self._waits,
            polls=self._polls,
        )
