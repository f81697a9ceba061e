"""Fault runs (`make faults`): one infrastructure fault at a time on a fresh run.

Each scenario runs in a child process of its own with everything private to it, all on
loopback: a database (copied from a migrated template) on a PostgreSQL cluster this harness
starts itself (so it may restart or stop it: `pg_ctl restart -m immediate`), a redis-server
without persistence, moto's S3 server behind a fault proxy (refuse, hang), the platform
simulator behind a fault proxy (unreachable), two Celery workers and the dispatcher (two for
the leader scenario). A run of a few hundred samples over four platforms (three direct
streaming APIs and the collection provider) is launched; once a fifth of it is done the
scenario's fault is injected and held, then lifted, and the run must finish **by itself**:

* every sample succeeded (the simulator injects nothing else), none parked, none failed;
* every finished run settled (no money held), `check_invariants` and `check_ledger` clean;
* every answer the simulator generated is recorded, and no provider task exists twice;
* no product process exited, where the scenario says processes ride the fault out.

    python bench/faults.py [--seed N] [--only NAME ...] [--fault-seconds S]

It prints one line per scenario (samples, answers generated and recorded, parked, seconds to
finish after the fault ended) and a JSON report under the work folder; exit 1 on any problem.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "geo_collect.settings")

from geo_collect.processes import ManagedProcess as Proc  # noqa: E402  (needs ROOT on sys.path)
from geo_collect.processes import (  # noqa: E402
    dispatcher_command,
    redis_answers,
    redis_server_command,
    worker_command,
)
from tests.tcp_proxy import TcpProxy  # noqa: E402

WORK = Path(os.environ.get("GEO_FAULTS_DIR", "/tmp/geo-faults"))
DATABASE = "geo_faults"
TEMPLATE = "geo_faults_template"
LEASE_SECONDS = 120  # the production default (geo_collect/settings.py)
PLATFORMS = ["openai", "anthropic", "deepseek", "collector"]
QUESTIONS = 30
REPEATS = 3  # 30 questions x 4 platforms x 3 = 360 samples
PROFILE: dict[str, Any] = {"latency_ms": [20, 200], "platforms": {}}  # no fault but the one
BRAND = {"name": "Acme", "aliases": ["ACME"], "domains": ["acme.com"]}
COMPETITORS = [{"name": "Globex", "aliases": [], "domains": ["globex.com"]}]


# The operator's policy for the direct APIs (they cannot say whether they ran a request cut
# off after it was sent): ask again a minute after the uncertain attempt began, not park it
# for a person (GEO_<PLATFORM>_UNCERTAIN_REASK_SECONDS).
REASK = tuple((f"GEO_{p.upper()}_UNCERTAIN_REASK_SECONDS", "60") for p in PLATFORMS[:3])


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# --- the private PostgreSQL cluster ----------------------------------------------------------


class Cluster:
    """A PostgreSQL cluster of the harness's own (initdb in the work folder), so a scenario may
    restart or stop it without touching the machine's server."""

    def __init__(self, directory: Path, port: int) -> None:
        self.directory = directory
        self.port = port
        self.bin = _postgres_bin()

    @property
    def admin_url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, name: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"

    def _as_owner(self, *command: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *command], check=True, stdout=subprocess.DEVNULL)

    def init(self) -> None:
        self.directory.mkdir(parents=True)
        if os.geteuid() == 0:  # PostgreSQL refuses to run as root
            shutil.chown(self.directory, "postgres", "postgres")
        self._as_owner(
            f"{self.bin}/initdb", "-D", str(self.directory), "-U", "postgres",
            "--auth=trust", "--no-sync",
        )  # fmt: skip

    def pg_ctl(self, action: str, *extra: str) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.directory} "
            "-c fsync=off -c max_connections=200"
        )
        self._as_owner(
            f"{self.bin}/pg_ctl", "-D", str(self.directory), "-l", str(self.directory / "log"),
            "-o", options, "-w", action, *extra,
        )  # fmt: skip

    def stop_now(self) -> None:
        self.pg_ctl("stop", "-m", "immediate")

    def restart_now(self) -> None:
        self.pg_ctl("restart", "-m", "immediate")

    def admin(self, *statements: str) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)


def _postgres_bin() -> str:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        sys.exit("faults need PostgreSQL's server binaries (initdb, pg_ctl)")
    return str(found[-1].parent)


# --- one scenario ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    name: str
    fault: str  # what the table of issue 30 says was done
    inject: Callable[[World, float], None]  # holds the fault for the given seconds, lifts it
    storage: str = "local"  # "s3" through the fault proxy, or the local var folder
    dispatchers: int = 1
    ride_out: bool = True  # no product process may exit
    withhold_queue: str = ""  # workers do not consume it until the fault
    skew: str = ""  # libfaketime's FAKETIME for worker w1 from the start, e.g. "+2h"
    lease_seconds: int = LEASE_SECONDS
    settings: tuple[tuple[str, str], ...] = ()  # more environment for the product's processes


@dataclass
class World:
    scenario: Scenario
    seed: int
    cluster: Cluster
    work: Path
    env: dict[str, str] = field(default_factory=dict)
    procs: dict[str, Proc] = field(default_factory=dict)
    exits: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    redis_port: int = 0
    sim_port: int = 0
    upstream: TcpProxy | None = None
    store: TcpProxy | None = None

    # -- set-up ---------------------------------------------------------------------------
    def start(self) -> None:
        (self.work / "logs").mkdir(parents=True)
        self.cluster.admin(
            f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)",
            f"CREATE DATABASE {DATABASE} TEMPLATE {TEMPLATE}",
        )
        self.redis_port = free_port()
        self._proc("redis", redis_server_command(port=self.redis_port, directory=self.work))
        if not redis_answers(self.redis_port, seconds=10.0):
            raise RuntimeError("redis-server did not start")
        self.env = {
            "DATABASE_URL": self.cluster.url(DATABASE),
            "REDIS_URL": f"redis://127.0.0.1:{self.redis_port}/0",
            "GEO_VAR_DIR": str(self.work / "var"),
            "GEO_LEASE_SECONDS": str(self.scenario.lease_seconds),
            "GEO_VISIBILITY_TIMEOUT": str(self.scenario.lease_seconds * 2),
            "GEO_PLATFORM_CONCURRENCY": "6",
            "GEO_LOG_LEVEL": "WARNING",
        }
        self.env |= dict(self.scenario.settings)
        if self.scenario.storage == "s3":
            self.env |= self._start_s3()
        self.env["GEO_UPSTREAM_BASE_URL"] = self._start_simulator()
        os.environ.update(self.env)

    def _proc(self, name: str, command: list[str], env: dict[str, str] | None = None) -> Proc:
        proc = Proc(name, command, env or self.env, self.work / "logs" / f"{name}.log")
        self.procs[name] = proc.start()
        return proc

    def _start_s3(self) -> dict[str, str]:
        port = free_port()
        self._proc(
            "moto", [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
        )
        _wait_http(f"http://127.0.0.1:{port}/")
        import boto3

        keys = {"aws_access_key_id": "faults", "aws_secret_access_key": "faults"}
        s3 = boto3.client(
            "s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1", **keys
        )
        s3.create_bucket(Bucket="evidence")
        self.store = TcpProxy(target_host="127.0.0.1", target_port=port).start()
        return {
            "S3_BUCKET": "evidence",
            "S3_ENDPOINT_URL": f"http://127.0.0.1:{self.store.port}",
            "S3_ACCESS_KEY_ID": "faults",
            "S3_SECRET_ACCESS_KEY": "faults",
            "S3_ADDRESSING_STYLE": "path",
        }

    def _start_simulator(self) -> str:
        self.sim_port = free_port()
        (self.work / "profile.json").write_text(json.dumps(PROFILE))
        (self.work / "world.json").write_text(json.dumps([BRAND, *COMPETITORS]))
        self._proc(
            "simulator",
            [sys.executable, "manage.py", "simulator", "--port", str(self.sim_port),
             "--seed", str(self.seed), "--profile", str(self.work / "profile.json"),
             "--world", str(self.work / "world.json")],
        )  # fmt: skip
        _wait_http(f"http://127.0.0.1:{self.sim_port}/_sim/health")
        self.upstream = TcpProxy(target_host="127.0.0.1", target_port=self.sim_port).start()
        return f"http://127.0.0.1:{self.upstream.port}"

    def start_product(self) -> None:
        from geo_collect.processes import ALL_QUEUES

        queues = [q for q in ALL_QUEUES if q != self.scenario.withhold_queue]
        self.worker("w1", queues, env=_skewed_clock(self.scenario.skew))
        self.worker("w2", queues)
        for index in range(1, self.scenario.dispatchers + 1):
            self._proc(f"dispatcher{index}", dispatcher_command(interval=0.3))

    def worker(self, name: str, queues: list[str], env: dict[str, str] | None = None) -> Proc:
        command = worker_command(name=f"{name}@faults", queues=queues, concurrency=6)
        return self._proc(name, command, env={**self.env, **(env or {})})

    def product(self) -> list[Proc]:
        return [p for n, p in self.procs.items() if n[0] in "wd"]

    def supervise(self) -> None:
        """Start again what exited (production runs these under a supervisor) and note it."""
        for proc in self.product():
            if not proc.alive() and proc.popen is not None:
                self.exits.append(f"{proc.name} exited with {proc.returncode}")
                proc.start()

    def pause(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.supervise()
            time.sleep(0.5)

    def restart_redis(self) -> None:
        self.procs["redis"].kill()
        time.sleep(1.0)
        self.procs["redis"].start()
        if not redis_answers(self.redis_port, seconds=10.0):
            raise RuntimeError("redis-server did not start again")

    def shutdown(self) -> None:
        for name, proc in reversed(self.procs.items()):
            with contextlib.suppress(Exception):
                os.kill(proc.pid, signal.SIGCONT)
            proc.stop(timeout=10)
            del name
        for proxy in (self.upstream, self.store):
            if proxy is not None:
                proxy.cut()


FAKETIME_LIBRARY = next(  # Debian's libfaketime, in the machine's multiarch folder
    iter(sorted(Path("/usr/lib").glob("*/faketime/libfaketimeMT.so.1"))),
    Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"),
)


def _skewed_clock(skew: str) -> dict[str, str]:
    """The environment that moves a process's wall clock by `skew` (monotonic time stays)."""
    if not skew:
        return {}
    if not FAKETIME_LIBRARY.exists():
        sys.exit(
            f"the clock scenarios need libfaketime ({FAKETIME_LIBRARY}): make faults installs it"
        )
    return {
        "LD_PRELOAD": str(FAKETIME_LIBRARY),
        "FAKETIME": skew,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


def _wait_http(url: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5):  # noqa: S310 (loopback http)
                return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer")


# --- the faults ------------------------------------------------------------------------------


def pg_restart(world: World, seconds: float) -> None:
    for _ in range(2):
        world.cluster.restart_now()
        world.pause(seconds / 3)


def pg_down(world: World, seconds: float) -> None:
    world.cluster.stop_now()
    world.pause(seconds)
    world.cluster.pg_ctl("start")


def store_refuses(world: World, seconds: float) -> None:
    assert world.store is not None
    world.store.cut()
    world.pause(seconds)
    world.store.restore()


def store_hangs(world: World, seconds: float) -> None:
    assert world.store is not None
    world.store.hang()
    world.pause(seconds)
    world.store.restore()


def redis_restart(world: World, seconds: float) -> None:
    world.restart_redis()


def platforms_down(world: World, seconds: float) -> None:
    assert world.upstream is not None
    world.upstream.cut()
    world.pause(seconds)
    world.upstream.restore()


def leader_stopped(world: World, seconds: float) -> None:
    """SIGSTOP the leading dispatcher for 1.5 x the fault time; a standby must take over within
    30 s (the lease, GEO_LEADER_LEASE_SECONDS, in database time)."""
    leader = _leader(world)
    if leader is None:
        world.notes.append("PROBLEM: no dispatcher held the leader lease")
        return
    os.kill(leader.pid, signal.SIGSTOP)
    stopped = time.monotonic()
    taken_over = None
    while time.monotonic() - stopped < seconds * 1.5:
        if taken_over is None and _leader(world) is not leader:
            taken_over = time.monotonic() - stopped
            world.notes.append(f"standby took over {taken_over:.1f}s after the leader stopped")
        time.sleep(0.5)
    os.kill(leader.pid, signal.SIGCONT)
    if taken_over is None or taken_over > 30:
        world.notes.append("PROBLEM: no standby took over within 30 s")


def _leader(world: World) -> Proc | None:
    import psycopg

    with psycopg.connect(world.env["DATABASE_URL"]) as conn:
        row = conn.execute(
            "SELECT holder FROM pipeline_leaderlease WHERE lease_until > now() ORDER BY epoch DESC"
        ).fetchone()
    holder = str(row[0]) if row else ""
    return next((p for p in world.product() if holder.endswith(f":{p.pid}")), None)


def worker_killed(world: World, seconds: float) -> None:
    """SIGKILL a worker with direct submits in flight and keep it down past its leases."""
    victim = world.procs["w1"]
    victim.kill()
    world.procs.pop("w1")  # not restarted by the supervisor meanwhile
    world.pause(max(seconds, world.scenario.lease_seconds * 1.5))
    world.procs["w1"] = victim.start()


def disk_full(world: World, seconds: float) -> None:
    """Fill the var folder (evidence and metrics: a tmpfs of its own) to the last byte."""
    filler = world.work / "var" / "filler"
    with open(filler, "wb", buffering=0) as out:  # unbuffered: the close has nothing to flush
        with contextlib.suppress(OSError):
            while True:
                out.write(b"\0" * (1 << 20))
        with contextlib.suppress(OSError):
            while True:
                out.write(b"\0" * 4096)
    world.pause(seconds)
    filler.unlink()


def skewed_worker(world: World, seconds: float) -> None:
    """The skew is w1's from its start (Scenario.skew); the run goes on meanwhile."""
    world.pause(seconds)


def redis_lost_run_end(world: World, seconds: float) -> None:
    """Once the run is finished and its run-finished event relayed to the broker, where no
    worker takes it yet, Redis restarts empty; then a worker for that queue starts."""
    import psycopg

    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        world.supervise()
        with psycopg.connect(world.env["DATABASE_URL"]) as conn:
            relayed = conn.execute(
                "SELECT count(*) FROM sampling_outboxmessage"
                " WHERE task = 'pipeline.run_finished' AND sent_at IS NOT NULL"
            ).fetchone()
        if relayed and relayed[0]:
            break
        time.sleep(0.5)
    world.restart_redis()
    world.worker("w-default", [world.scenario.withhold_queue])


SCENARIOS = {
    s.name: s
    for s in [
        Scenario("pg_restart", "PostgreSQL restarted (immediate) twice mid-run", pg_restart),
        Scenario("pg_down", "PostgreSQL down for the fault time", pg_down),
        Scenario("store_refuses", "evidence store refusing connections", store_refuses, "s3"),
        Scenario("store_hangs", "evidence store hanging", store_hangs, "s3"),
        Scenario(
            "redis_restart",
            "Redis killed and restarted empty mid-run",
            redis_restart,
            ride_out=False,
        ),
        # Requests in flight when the platforms go are cut after they were sent: whether
        # the platform ran them is unknowable, as for a killed worker's.
        Scenario("platforms_down", "every platform unreachable", platforms_down, settings=REASK),
        Scenario(
            "leader_stopped",
            "the leading dispatcher stopped, a standby running",
            leader_stopped,
            dispatchers=2,
        ),
        Scenario(
            "worker_killed",
            "a worker killed with direct submits in flight, down past its lease",
            worker_killed,
            ride_out=False,
            lease_seconds=20,  # down past its lease without waiting minutes
            settings=REASK,
        ),
        Scenario("disk_full", "the var folder (evidence, metrics) full", disk_full),
        Scenario("clock_ahead", "one worker's clock 2 h ahead", skewed_worker, skew="+2h"),
        Scenario("clock_behind", "one worker's clock 2 h behind", skewed_worker, skew="-2h"),
        Scenario(
            "redis_lost_run_end",
            "Redis restarted empty while the run-finished event was queued",
            redis_lost_run_end,
            ride_out=False,
            withhold_queue="default",
        ),
    ]
}


# --- running one scenario (in its own process) -----------------------------------------------


def launch_run() -> Any:
    from billing.services import ensure_default_price_version, top_up
    from pipeline.launch import launch_run as launch
    from sampling.planning import parse_campaign_spec
    from sampling.services import save_campaign
    from tenancy.models import Tenant

    version = ensure_default_price_version()
    tenant = Tenant.objects.create(slug="alpha", name="Alpha")
    top_up(tenant=tenant, amount=10**10, currency=version.currency, idempotency_key="faults")
    targets = [
        {"platform": p, "device": "desktop", "region": "us", "mode": "web_search"}
        | ({"mode": "no_search"} if p == "deepseek" else {})
        for p in PLATFORMS
    ]
    spec = {
        "tenant": "alpha",
        "name": "faults",
        "brand": BRAND,
        "competitors": COMPETITORS,
        "questions": [f"Which CRM vendor suits a team of {i + 2}?" for i in range(QUESTIONS)],
        "targets": targets,
        "repeats": REPEATS,
        "screenshot_policy": "none",  # Chromium per answer would measure the machine, not faults
    }
    return launch(campaign=save_campaign(spec=parse_campaign_spec(spec)))


def terminal_fraction(run: Any) -> float:
    from sampling.models import Sample

    done = Sample.objects.filter(run=run, queue_state="done").count()
    return done / run.planned_samples


def run_scenario(
    scenario: Scenario, seed: int, fault_seconds: float, cluster: Cluster
) -> dict[str, Any]:
    work = WORK / scenario.name
    world = World(scenario=scenario, seed=seed, cluster=cluster, work=work)
    if scenario.name == "disk_full":
        (work / "var").mkdir(parents=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(work / "var")], check=True
        )
    try:
        world.start()
        import django

        django.setup()
        run = launch_run()
        world.start_product()
        rng = random.Random(seed)
        start_at = 0.15 + rng.random() * 0.15  # the fault starts after 15-30 % are done
        started = time.monotonic()
        while _read(lambda: terminal_fraction(run)) < start_at:
            if time.monotonic() - started > 600:
                raise RuntimeError("the run made no progress before the fault")
            world.pause(0.5)
        log(f"{scenario.name}: injecting at {terminal_fraction(run):.0%} done: {scenario.fault}")
        scenario.inject(world, fault_seconds)
        lifted = time.monotonic()
        finished = wait_finished(world, run, timeout=600)
        after = time.monotonic() - lifted
        upstream = _get_json(f"http://127.0.0.1:{world.sim_port}/_sim/log")["answers"]
        return _read(lambda: verdict(world, run, finished, after, upstream))
    finally:
        world.shutdown()
        if scenario.name == "disk_full":
            subprocess.run(["umount", "-l", str(work / "var")], check=False)


def wait_finished(world: World, run: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        world.supervise()
        state = _read(lambda: _run_state(world, run))
        if state is not None:
            return state
        time.sleep(1.0)
    return False


def _run_state(world: World, run: Any) -> bool | None:
    """True once the run finished and settled, False if it waits for a person, else None."""
    from billing.selectors import unsettled_samples
    from sampling.models import Run, Sample

    fresh = Run.objects.get(pk=run.pk)
    if fresh.finished_at and not unsettled_samples(fresh).exists():
        return True
    if Sample.objects.filter(run=run, queue_state="parked").exists():
        return False  # waits for a person: the fault became a verdict
    return None


def _read(query: Callable[[], Any], seconds: float = 180.0) -> Any:
    """`query()` through the harness's own database connection, reconnecting while the
    scenario has PostgreSQL restarted or stopped."""
    from django.db import Error, connections

    deadline = time.monotonic() + seconds
    while True:
        try:
            return query()
        except Error:
            if time.monotonic() > deadline:
                raise
            connections.close_all()
            time.sleep(1.0)


def _times_off_database_clock(run: Any) -> list[str]:
    """Every time the product recorded for the run lies between the run's creation and now,
    both by the database's clock: a worker's skewed clock never reaches a record."""
    from django.db import models
    from django.db.models.functions import Now

    from evidence.models import Capture
    from sampling.models import Attempt, Run, Sample

    created = Run.objects.values_list("created_at", flat=True).get(pk=run.pk)
    found = []
    for model, rows in (
        (Run, Run.objects.filter(pk=run.pk)),
        (Sample, Sample.objects.filter(run=run)),
        (Attempt, Attempt.objects.filter(sample__run=run)),
        (Capture, Capture.objects.filter(sample__run=run)),
    ):
        for f in model._meta.get_fields():
            if not isinstance(f, models.DateTimeField) or f.name in ("due_at", "lease_until"):
                continue  # due and lease times are meant to lie ahead
            late = rows.filter(**{f"{f.name}__gt": Now()}).count()
            early = rows.filter(**{f"{f.name}__lt": created}).count()
            if late or early:
                found.append(
                    f"{model.__name__}.{f.name}: {late} after now, {early} before the run began"
                )
    return found


def _unfinished(run: Any) -> list[str]:
    """What the samples that did not end are doing, grouped."""
    from django.db.models import Count

    from sampling.models import Sample

    fields = ("platform", "step", "queue_state", "submission_state", "collection_state")
    rows = (
        Sample.objects.filter(run=run)
        .exclude(queue_state="done")
        .values(*fields)
        .annotate(n=Count("id"))
    )
    return [f"{row.pop('n')} samples left: {row}" for row in rows]


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 (loopback http)
        return json.loads(response.read())


def verdict(
    world: World, run: Any, finished: bool, after: float, upstream: list[dict[str, Any]]
) -> dict[str, Any]:
    from io import StringIO

    from django.core.management import call_command
    from django.core.management.base import CommandError

    from bench.chaos import upstream_log_check
    from pipeline.invariants import check_all
    from sampling.models import Attempt, Sample
    from sampling.selectors import run_status

    status = run_status(run_id=run.pk)
    problems = [note for note in world.notes if note.startswith("PROBLEM")]
    if not finished:
        problems.append("the run did not finish by itself (or waits for a person)")
        problems += _unfinished(run)
    if world.scenario.ride_out:
        problems += world.exits
    parked = Sample.objects.filter(run=run, queue_state="parked").count()
    if status.failed:
        problems.append(f"{status.failed} samples failed")
    if parked:
        problems.append(f"{parked} samples parked")
    holder = type("Upstream", (), {"upstream_answers": upstream})
    upstream_problems, generated = upstream_log_check(holder)  # type: ignore[arg-type]
    problems += upstream_problems
    problems += [str(v) for v in check_all()]
    ledger = StringIO()
    try:
        call_command("check_ledger", stdout=ledger, stderr=ledger)
    except CommandError as error:
        problems.append(f"check_ledger: {error}")
    problems += _times_off_database_clock(run)
    recorded = Attempt.objects.filter(sample__run=run).exclude(upstream_id="").count()
    return {
        "scenario": world.scenario.name,
        "fault": world.scenario.fault,
        "samples": status.planned,
        "succeeded": status.succeeded,
        "failed": status.failed,
        "parked_uncertain": parked,
        "upstream_generated": sum(generated.values()),
        "recorded": recorded,
        "seconds_to_finish_after_fault": round(after, 1),
        "process_exits": world.exits,
        "notes": world.notes,
        "problems": problems,
    }


# --- the parent: one cluster, a child process per scenario -------------------------------------


def prepare_cluster() -> Cluster:
    if WORK.exists():
        for tmpfs in WORK.glob("*/var"):
            subprocess.run(["umount", "-l", str(tmpfs)], check=False, stderr=subprocess.DEVNULL)
        shutil.rmtree(WORK)
    WORK.mkdir(parents=True)
    cluster = Cluster(WORK / "pg", free_port())
    cluster.init()
    cluster.pg_ctl("start")
    cluster.admin(f"CREATE DATABASE {TEMPLATE}")
    env = {**os.environ, "DATABASE_URL": cluster.url(TEMPLATE)}
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--verbosity", "0"], cwd=ROOT, env=env, check=True
    )
    return cluster


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    parser.add_argument("--only", nargs="*", choices=sorted(SCENARIOS), default=None)
    parser.add_argument("--fault-seconds", type=float, default=60.0)
    parser.add_argument("--child", help=argparse.SUPPRESS)  # scenario name, cluster port
    args = parser.parse_args()
    if args.child:
        name, port = args.child.split(":")
        cluster = Cluster(WORK / "pg", int(port))
        result = run_scenario(SCENARIOS[name], args.seed, args.fault_seconds, cluster)
        (WORK / f"{name}.json").write_text(json.dumps(result, indent=2))
        return 0
    cluster = prepare_cluster()
    results = []
    try:
        for name in args.only or list(SCENARIOS):
            log(f"scenario {name} (seed {args.seed}, fault {args.fault_seconds:.0f}s)")
            child = [sys.executable, __file__, "--seed", str(args.seed),
                     "--child", f"{name}:{cluster.port}",
                     "--fault-seconds", str(args.fault_seconds)]  # fmt: skip
            code = subprocess.run(child, cwd=ROOT).returncode
            path = WORK / f"{name}.json"
            result = json.loads(path.read_text()) if path.exists() else {
                "scenario": name, "problems": [f"the scenario crashed (exit {code})"]
            }  # fmt: skip
            results.append(result)
            log(summary_line(result))
    finally:
        with contextlib.suppress(Exception):
            cluster.pg_ctl("stop", "-m", "fast")
    (WORK / "report.json").write_text(
        json.dumps({"seed": args.seed, "scenarios": results}, indent=2)
    )
    failed = [r for r in results if r["problems"]]
    print("\n" + "\n".join(summary_line(r) for r in results))
    for result in failed:
        for problem in result["problems"][:10]:
            print(f"  {result['scenario']}: {problem}")
    clean = len(results) - len(failed)
    print(
        f"\nFAULTS {'FAILED' if failed else 'PASSED'}: {clean}/{len(results)} scenarios clean,"
        f" seed {args.seed} (report: {WORK / 'report.json'})"
    )
    return 1 if failed else 0


def summary_line(r: dict[str, Any]) -> str:
    if "samples" not in r:
        return f"{r['scenario']:<20} CRASHED"
    return (
        f"{r['scenario']:<20} {'ok  ' if not r['problems'] else 'FAIL'} {r['samples']} samples,"
        f" {r['succeeded']} succeeded, {r['failed']} failed, {r['parked_uncertain']} parked;"
        f" upstream {r['upstream_generated']} generated, {r['recorded']} recorded;"
        f" finished {r['seconds_to_finish_after_fault']}s after the fault;"
        f" exits {len(r['process_exits'])}" + "".join(f"; {note}" for note in r["notes"])
    )


if __name__ == "__main__":
    sys.exit(main())
