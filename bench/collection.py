"""Benchmark: collection throughput and its whole-system CPU against a minimal asyncio client
(issue 15 item 4, issue 25 item 11).

Per concurrency (64 and 128 by default), side by side in one run: `--samples` direct-API
samples (platform `openai`, streamed answers, no faults, no screenshots) launched and collected
by the real dispatcher and one real Celery worker process (Redis broker, PostgreSQL, analysis
inline, logs at WARNING) against the project's simulator answering after `--latency` seconds;
and a minimal asyncio client (asyncio's streams, a kept-alive HTTP/1.1 connection per lane)
streaming the same requests to the same simulator at the same concurrency, reading every
stream to its end.

Timed: the product from just before `launch_run` to the run's `finished_at` (database clock;
the moment `run_status` first says nothing is pending is printed too); the reference from its
first request to its last answer. CPU per sample, each process from /proc: the worker, the
dispatcher and the private redis-server (their whole process trees), PostgreSQL (the backends
of the bench database and the server's own processes, bench/postgres_cpu.py says what it
counts), the simulator; the reference's own CPU and the simulator's during it. Also PostgreSQL
sessions, commits and row writes per sample, what the product's sessions wait on, the
rate-limit run (a configured submit rate against plenty of concurrency), and one in-process
pass that counts steps and SQL statements per step (and, with --profile, where a step's CPU
goes).

Its own database (geo_bench_collection), its own redis-server and simulator. Not a test:
`python bench/collection.py [--samples 1000] [--concurrency 64 128] [--workers 1]`;
`measure()` for bench/run_all.py runs the same in a child process and returns the rows
(GEO_BENCH_COLLECTION_SAMPLES sets --samples there).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "geo_collect.settings")

from bench.postgres_cpu import PostgresCPU, PostgresShare
from bench.processes import (
    ROOT,
    Background,
    fresh_database,
    proc_stat,
    start_redis,
    start_simulator,
    tree_cpu_seconds,
)
from bench.table import BenchRow, render

# Overridable so that engineers sharing a server do not drop each other's bench database.
BENCH_DB = os.environ.get("GEO_BENCH_COLLECTION_DB", "geo_bench_collection")
WORK = ROOT / "var" / "bench-collection"
PLATFORM = "openai"
ANALYSIS_CAP = 32
TARGET = {"platform": PLATFORM, "device": "desktop", "region": "us", "mode": "web_search"}
TARGET_RATIO = 0.9  # of the asyncio client's samples/s, launch to finished (issue 25)
TARGET_CPU_MS = 15.0  # worker + dispatcher + PostgreSQL per sample (issue 25)


@dataclass
class Args:
    samples: int = 1000
    concurrency: tuple[int, ...] = (64, 128)
    latency: float = 2.0
    workers: int = 1
    rate_limit: float = 20.0
    rate_samples: int = 400
    profile: bool = False


def measure() -> list[BenchRow]:
    """The whole benchmark in a child process (its own settings and environment)."""
    samples = os.environ.get("GEO_BENCH_COLLECTION_SAMPLES", str(Args.samples))
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--json", "--samples", samples],
        cwd=ROOT,
        check=True,
        stdout=subprocess.PIPE,
    ).stdout.decode()
    return [BenchRow(**row) for row in json.loads(out.strip().splitlines()[-1])]


# --- set-up ---------------------------------------------------------------------------------


SERVICES: dict[str, int] = {}  # "simulator", "redis": their pids, for their CPU


def _environment(args: Args) -> tuple[list[Background], dict[str, str]]:
    if WORK.exists():
        shutil.rmtree(WORK)
    (WORK / "var").mkdir(parents=True)
    database = fresh_database(BENCH_DB)
    redis_server, redis_url = start_redis(WORK)
    # Streamed answers (the openai adapter asks for a stream) after a fixed latency.
    profile = {"rates": {}, "latency_ms": [args.latency * 1000] * 2, "citation_rate": 0.8}
    simulator, base_url = start_simulator(WORK, profile)
    SERVICES.update(simulator=simulator.pid, redis=redis_server.pid)
    env = {
        "DATABASE_URL": database,
        "REDIS_URL": redis_url,
        "GEO_UPSTREAM_BASE_URL": base_url,
        "GEO_VAR_DIR": str(WORK / "var"),
        "GEO_LEASE_SECONDS": "300",
        "GEO_LOG_LEVEL": "WARNING",
        "GEO_ANALYSE_INLINE": "1",  # the answer analysed in the step that collects it
        "GEO_ANALYSIS_CONCURRENCY": str(ANALYSIS_CAP),
        # Admission by concurrency only (the rate-limit run configures a rate of its own).
        "GEO_DEFAULT_RATE_LIMIT": "10000",
    }
    os.environ.update(env)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return [simulator, redis_server], env


def _campaign(name: str, questions: int, tenant: str, max_concurrency: int) -> Any:
    from billing.services import ensure_default_price_version, top_up
    from sampling.planning import parse_campaign_spec
    from sampling.services import save_campaign
    from tenancy.models import Tenant

    owner, _ = Tenant.objects.get_or_create(slug=tenant, defaults={"name": tenant})
    Tenant.objects.filter(pk=owner.pk).update(max_concurrency=max_concurrency)
    version = ensure_default_price_version()
    top_up(tenant=owner, amount=10**12, currency=version.currency, idempotency_key="bench")
    spec = parse_campaign_spec(
        {
            "tenant": tenant,
            "name": name,
            "brand": {"name": "Acme", "aliases": [], "domains": ["acme.example"]},
            "questions": [f"{name} question {i}: which tool is best?" for i in range(questions)],
            "targets": [TARGET],
            "screenshot_policy": "none",
            "repeats": 1,
        }
    )
    return save_campaign(spec=spec)


def _launch(
    name: str, samples: int, *, tenant: str = "bench", max_concurrency: int = 100_000
) -> Any:
    from pipeline.launch import launch_run

    return launch_run(campaign=_campaign(name, samples, tenant, max_concurrency))


def _cpu_ms(seconds: float, samples: int) -> float:
    return seconds * 1000 / samples


# --- the reference --------------------------------------------------------------------------


Requests = list[tuple[str, dict[str, Any], dict[str, str]]]


def _reference_requests(name: str, samples: int) -> Requests:
    """The requests of a run like the product's, planned for a tenant whose concurrency cap
    is 0: the reference asks its questions, the product's dispatcher never claims them."""
    run = _launch(name, samples, tenant="reference", max_concurrency=0)
    return _requests(run)


def _requests(run: Any) -> Requests:
    """The exact requests the product's connector sends for the run's samples."""
    from connectors.base import SampleRequest
    from connectors.registry import get_connector
    from sampling.snapshots import RunConfig

    connector = get_connector(PLATFORM)
    url = f"{connector.config.base_url}/v1/responses"
    headers = {
        "Authorization": f"Bearer {connector.config.api_key}",
        "Accept": "text/event-stream",
    }
    # The model the run froze at launch.
    model = RunConfig.of(run).model_for(PLATFORM)
    out = []
    for sample in run.samples.select_related("question_revision").order_by("pk"):
        request = SampleRequest(
            sample_id=sample.pk,
            idempotency_key=f"ref:{sample.pk}",
            question=sample.question_revision.text,
            device=sample.device,
            region=sample.region,
            mode=sample.mode,
            model=model,
        )
        out.append((url, connector.request_body(request), headers))  # type: ignore[attr-defined]
    return out


def reference(requests: Requests, concurrency: int) -> dict[str, float]:
    """A minimal asyncio client: the same requests, `concurrency` lanes, each with one kept-alive
    HTTP/1.1 connection of asyncio's own streams, each response read to its end; timed from the
    first request to the last answer. No HTTP library: httpx's connection pool spent 5 ms of
    CPU per answer at C=128 (1.7 at C=64) and held the reference to 52/s where this reaches 60
    (docs/decisions.md, "The collection bench's reference: asyncio streams")."""
    last_answer = 0.0

    async def main() -> int:
        nonlocal last_answer
        pending = iter(requests)
        done = 0

        async def lane() -> None:
            nonlocal done, last_answer
            streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
            for url, body, headers in pending:
                try:
                    if streams is None:
                        where = urlsplit(url)
                        streams = await asyncio.open_connection(where.hostname, where.port)
                    status = await _post(*streams, url, body, headers)
                except (OSError, ValueError, asyncio.IncompleteReadError):  # not answered
                    streams = None
                    continue
                if status == 200:
                    done += 1
                    last_answer = time.perf_counter()
            if streams is not None:
                streams[1].close()

        await asyncio.gather(*(lane() for _ in range(concurrency)))
        return done

    cpu, simulator = time.process_time(), tree_cpu_seconds(SERVICES["simulator"])
    started = time.perf_counter()
    ok = asyncio.run(main())
    elapsed = last_answer - started
    return {
        "per_second": ok / elapsed if elapsed > 0 else 0.0,
        "elapsed": elapsed,
        "ok": ok,
        "cpu_ms": _cpu_ms(time.process_time() - cpu, len(requests)),
        "simulator_cpu_ms": _cpu_ms(
            tree_cpu_seconds(SERVICES["simulator"]) - simulator, len(requests)
        ),
    }


async def _post(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
) -> int:
    """One POST on a kept-alive connection; the response read to its end. Returns its status."""
    where = urlsplit(url)
    data = json.dumps(body).encode()
    lines = [f"POST {where.path} HTTP/1.1", f"Host: {where.netloc}"]
    lines += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + data)
    status = int((await reader.readline()).split()[1])
    length, chunked = None, False
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
        elif name.strip().lower() == "transfer-encoding":
            chunked = "chunked" in value.lower()
    if chunked:
        while size := int((await reader.readline()).split(b";")[0], 16):
            await reader.readexactly(size + 2)  # the chunk and its CRLF
        await reader.readline()  # the CRLF after the last chunk
    elif length is not None:
        await reader.readexactly(length)
    else:
        raise ValueError("a response without a length on a kept-alive connection")
    return status


# --- the product ----------------------------------------------------------------------------


def _pg_counters() -> dict[str, int]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sessions, xact_commit, tup_inserted + tup_updated + tup_deleted"
            " FROM pg_stat_database WHERE datname = current_database()"
        )
        sessions, commits, writes = cursor.fetchone()
    return {"sessions": sessions, "commits": commits, "writes": writes}


def _one(statement: str, params: Any = None) -> Any:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchone()


def _admin_dsn() -> str:
    """The server's `postgres` database: the CPU monitor's connection stays out of the bench's."""
    url = os.environ["DATABASE_URL"]
    return urlunsplit(urlsplit(url)._replace(path="/postgres"))


@contextmanager
def _product(
    env: dict[str, str], *, concurrency: int, workers: int, extra: dict[str, str]
) -> Iterator[tuple[list[Background], Background]]:
    from geo_collect.processes import dispatcher_command, worker_command

    child = {**env, "GEO_PLATFORM_CONCURRENCY": str(concurrency), **extra}
    queues = (f"platform.{PLATFORM}", "analysis", "default")
    threads = -(-(concurrency + ANALYSIS_CAP) // workers)
    procs = [
        Background(
            worker_command(name=f"bench{i}-{os.getpid()}@%h", queues=queues, concurrency=threads),
            WORK / f"worker{i}.log",
            child,
        )
        for i in range(workers)
    ]
    dispatcher = Background(dispatcher_command(interval=0.1), WORK / "dispatcher.log", child)
    try:
        yield procs, dispatcher
    finally:
        for proc in [*procs, dispatcher]:
            proc.stop()


def _pending(run_id: Any) -> int | None:
    """What run_status says is still pending (None if the selector is not where it was)."""
    try:
        from sampling.selectors import run_status
    except ImportError:
        return None
    return int(run_status(run_id=run_id).pending)


def _wait(run_id: Any, timeout: float, *, since: Any = None) -> dict[str, float]:
    """Poll every 0.1 s until the run has finished_at. Returns, in seconds of database time
    after `since` (default: the run's created_at), when it finished and when run_status first
    said nothing was pending."""
    from sampling.models import Run

    deadline = time.perf_counter() + timeout
    status_done = None
    while True:
        finished_at, now = _one(
            "SELECT finished_at, clock_timestamp() FROM sampling_run WHERE id = %s", [run_id]
        )
        if status_done is None and _pending(run_id) == 0:
            status_done = now
        if finished_at is not None:
            break
        if time.perf_counter() > deadline:
            raise RuntimeError(f"run {run_id} did not finish in {timeout:.0f}s; see {WORK}")
        time.sleep(0.1)
    start = since or Run.objects.values_list("created_at", flat=True).get(pk=run_id)
    return {
        "finished": (finished_at - start).total_seconds(),
        "status": ((status_done or finished_at) - start).total_seconds(),
    }


def product(
    env: dict[str, str],
    args: Args,
    concurrency: int,
    *,
    name: str,
    samples: int,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One measured run through the dispatcher and workers, after a small warm-up run: timed
    from just before launch_run to the run's finished_at, with every process's CPU."""
    from pipeline.launch import launch_run

    running = _product(env, concurrency=concurrency, workers=args.workers, extra=extra or {})
    with running as (workers, dispatcher):
        warm = _launch(f"{name}-warm", 2 * args.workers)
        _wait(warm.pk, 900)  # worker start-up on a loaded machine
        campaign = _campaign(name, samples, "bench", 100_000)  # saved before the clock starts
        harness = int(_one("SELECT pg_backend_pid()")[0])
        trees = {
            "worker": [w.pid for w in workers],
            "dispatcher": [dispatcher.pid],
            "redis": [SERVICES["redis"]],
            "simulator": [SERVICES["simulator"]],
        }
        before = _trees_cpu(trees)
        pg_before = _pg_counters()
        with PostgresCPU(dsn=_admin_dsn(), database=BENCH_DB, harness={harness}) as monitor:
            launch_pg = _backend_cpu(harness)
            started = _one("SELECT clock_timestamp()")[0]
            run = launch_run(campaign=campaign)  # the launch is the product's: timed, counted
            launch_pg = _backend_cpu(harness) - launch_pg
            timing = _wait(run.pk, 60 + samples * args.latency, since=started)
            cpu = {k: v - before[k] for k, v in _trees_cpu(trees).items()}
        pg = {k: v - pg_before[k] for k, v in _pg_counters().items()}
    share = monitor.share
    assert share is not None
    from sampling.models import Attempt, Sample

    accepted = Sample.objects.filter(run=run, analysis_state="accepted").count()
    postgres = share.bench + share.server + launch_pg
    per = {k: _cpu_ms(v, samples) for k, v in cpu.items()}
    per["postgres"] = _cpu_ms(postgres, samples)
    per["total"] = per["worker"] + per["dispatcher"] + per["postgres"]
    return {
        "run": run,
        "per_second": samples / timing["finished"],
        "elapsed": timing["finished"],
        "status_elapsed": timing["status"],
        "accepted": accepted,
        "cpu_ms": per,
        "postgres": share,
        "launch_pg_ms": _cpu_ms(launch_pg, samples),
        "pg": pg,
        "rate_limited": Attempt.objects.filter(sample__run=run, status_code=429).count(),
    }


def _trees_cpu(trees: dict[str, list[int]]) -> dict[str, float]:
    return {name: sum(tree_cpu_seconds(pid) for pid in pids) for name, pids in trees.items()}


def _backend_cpu(pid: int) -> float:
    stat = proc_stat(pid)
    return 0.0 if stat is None else stat.own


def _postgres_detail(share: PostgresShare, samples: int, launch_pg_ms: float) -> str:
    def ms(seconds: float) -> str:
        return f"{_cpu_ms(seconds, samples):.1f}"

    return (
        f"PostgreSQL CPU per sample: {ms(share.bench)} ms in the bench database's "
        f"{share.bench_backends} backends + {launch_pg_ms:.1f} ms launching + {ms(share.server)}"
        f" ms in the server's own processes (counted); not counted: {ms(share.other)} ms other "
        f"databases' backends, {ms(share.unattributed)} ms unattributed (exited between "
        f"readings), {_cpu_ms(share.harness, samples) - launch_pg_ms:.1f} ms the harness's "
        f"polling; whole postmaster tree "
        f"{ms(share.whole_tree)} ms"
    )


# --- in-process pass: steps, statements, profile --------------------------------------------


class _Statements:
    def __init__(self) -> None:
        self.count = 0
        self.lock = threading.Lock()

    def __call__(
        self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        with self.lock:
            self.count += 1
        return execute(sql, params, many, context)


def inline_pass(samples: int, *, profile: bool) -> dict[str, Any]:
    """Claim and execute every step of a small run in this process, counting what each does:
    the dispatcher's claims and each step's statements, separately. A step runs through the
    Celery task's own function (pipeline.execute_step), as a worker runs it."""
    from django.conf import settings
    from django.db import connection

    from pipeline.dispatch import Dispatcher
    from pipeline.tasks import execute_step
    from sampling.leases import claim_ready
    from sampling.models import Step

    run = _launch("inline", samples)
    worker, dispatcher = _Statements(), _Statements()
    steps = 0
    # CPU, not wall time: on a loaded machine the waits on PostgreSQL would hide the work.
    profiler = cProfile.Profile(time.process_time) if profile else None

    def one(claim: Any) -> None:
        try:
            with connection.execute_wrapper(worker):
                if profiler is not None:
                    profiler.runcall(execute_step, claim.sample_id, claim.token)
                else:
                    execute_step(claim.sample_id, claim.token)
        finally:
            connection.close()

    tick = Dispatcher(owner="inline")
    while not _finished(run.pk):
        with connection.execute_wrapper(dispatcher):
            claims = claim_ready(
                platform=PLATFORM,
                steps=(Step.SUBMIT, Step.ANALYSE),
                limit=samples,
                owner="inline",
                lease_seconds=settings.GEO_LEASE_SECONDS,
                only_tenant=run.tenant_id,  # not the reference's planned questions
            )
            if not claims:
                tick.tick()  # relay, finish runs, post pending captures
                time.sleep(0.1)
                continue
        steps += len(claims)
        if profiler is not None:  # one thread: cProfile sees only the thread it runs in
            for claim in claims:
                one(claim)
        else:
            with ThreadPoolExecutor(len(claims)) as pool:
                list(pool.map(one, claims))
    result: dict[str, Any] = {
        "samples": samples,
        "steps": steps / samples,
        "worker_sql": worker.count / samples,
        "dispatcher_sql": dispatcher.count / samples,
        "sql_per_step": worker.count / max(1, steps),
        "claim_sql_per_step": dispatcher.count / max(1, steps),
    }
    if profiler is not None:
        text = io.StringIO()
        order = os.environ.get("SORT", "cumulative")  # or tottime
        lines = int(os.environ.get("NSTATS", "45"))
        pstats.Stats(profiler, stream=text).sort_stats(order).print_stats(lines)
        result["profile"] = text.getvalue()
    return result


def _finished(run_id: Any) -> bool:
    from sampling.models import Run

    return Run.objects.filter(pk=run_id).exclude(finished_at=None).exists()


# --- rows ----------------------------------------------------------------------------------


def _rows(args: Args, env: dict[str, str], say: Callable[[str], None]) -> list[BenchRow]:
    rows: list[BenchRow] = []
    # First, so its steps per sample are known for the sessions per 1,000 steps below.
    inline = inline_pass(64, profile=args.profile)
    for concurrency in args.concurrency:
        ref = reference(_reference_requests(f"ref{concurrency}", args.samples), concurrency)
        say(f"C={concurrency} reference: {ref['per_second']:.1f}/s in {ref['elapsed']:.1f}s "
            f"({ref['ok']} ok), {ref['cpu_ms']:.2f} ms CPU per answer, simulator "
            f"{ref['simulator_cpu_ms']:.1f} ms")  # fmt: skip
        got = product(env, args, concurrency, name=f"c{concurrency}", samples=args.samples)
        rows += _collection_rows(args, concurrency, ref, got, inline, say)
    rows.append(_statements_row(inline, say))
    if args.rate_samples:  # --rate-samples 0: no rate-limit run
        rows.append(_rate_row(args, env, say))
    if "profile" in inline:
        say(inline["profile"])
    return rows


def _collection_rows(
    args: Args,
    concurrency: int,
    ref: dict[str, float],
    got: dict[str, Any],
    inline: dict[str, Any],
    say: Callable[[str], None],
) -> list[BenchRow]:
    cpu, pg = got["cpu_ms"], got["pg"]
    steps = inline["steps"] * args.samples
    say(
        f"C={concurrency} product: {got['per_second']:.1f}/s, launch to finished_at "
        f"{got['elapsed']:.1f}s (run_status said done at {got['status_elapsed']:.1f}s), "
        f"{got['accepted']} accepted; CPU per sample: worker {cpu['worker']:.1f} ms, "
        f"dispatcher {cpu['dispatcher']:.1f} ms, PostgreSQL {cpu['postgres']:.1f} ms, "
        f"Redis {cpu['redis']:.1f} ms (simulator {cpu['simulator']:.1f} ms); "
        f"{pg['sessions'] * 1000 / steps:.0f} PostgreSQL sessions per 1,000 steps, "
        f"{pg['commits'] / args.samples:.1f} commits and {pg['writes'] / args.samples:.1f} "
        f"row writes per sample; busy sessions by wait, per reading: "
        f"{got['postgres'].waits_summary()}"
    )
    say(f"C={concurrency} " + _postgres_detail(got["postgres"], args.samples, got["launch_pg_ms"]))
    ratio = got["per_second"] / ref["per_second"] if ref["per_second"] else 0.0
    return [
        BenchRow(
            name=f"collection {args.samples} streamed answers, C={concurrency}, launch to finished",
            product=f"{got['per_second']:.1f} samples/s ({got['elapsed']:.1f} s)",
            reference=f"{ref['per_second']:.1f} samples/s ({ref['elapsed']:.1f} s, asyncio)",
            ratio=f"{ratio:.2f} x",
            target=f">= {TARGET_RATIO} x",
            met=ratio >= TARGET_RATIO,
        ),
        BenchRow(
            name=f"collection CPU per sample, worker + dispatcher + PostgreSQL, C={concurrency}",
            product=(
                f"{cpu['total']:.1f} ms (worker {cpu['worker']:.1f}, dispatcher "
                f"{cpu['dispatcher']:.1f}, PostgreSQL {cpu['postgres']:.1f}; "
                f"Redis {cpu['redis']:.1f})"
            ),
            reference=f"{ref['cpu_ms']:.2f} ms (asyncio client)",
            ratio="",
            target=f"<= {TARGET_CPU_MS:g} ms",
            met=cpu["total"] <= TARGET_CPU_MS,
        ),
    ]


def _statements_row(inline: dict[str, Any], say: Callable[[str], None]) -> BenchRow:
    say(
        f"per sample (in-process pass of {inline['samples']}): {inline['steps']:.2f} steps, "
        f"{inline['worker_sql']:.1f} SQL statements in steps, "
        f"{inline['dispatcher_sql']:.1f} in claims"
    )
    return BenchRow(
        name=f"collection SQL statements per step (in-process pass, {inline['samples']} samples)",
        product=(
            f"{inline['sql_per_step']:.1f} in the step + {inline['claim_sql_per_step']:.2f} "
            f"in claims ({inline['steps']:.2f} steps per sample)"
        ),
        reference="",
        ratio="",
        target="shown (no target)",
        met=True,
    )


def _rate_row(args: Args, env: dict[str, str], say: Callable[[str], None]) -> BenchRow:
    """A configured submit rate well under what the concurrency allows: the product should
    sustain it and never exceed it (a provider enforcing it would answer 429)."""
    from sampling.models import Attempt

    rate = args.rate_limit
    limits = json.dumps({PLATFORM: {"submit": rate}})
    got = product(env, args, args.concurrency[0], name="rate", samples=args.rate_samples,
                  extra={"GEO_RATE_LIMITS": limits})  # fmt: skip
    starts = sorted(
        t.timestamp()
        for t in Attempt.objects.filter(sample__run=got["run"]).values_list("started_at", flat=True)
    )
    sustained = (len(starts) - 1) / (starts[-1] - starts[0])
    refused = _over_bucket(starts, rate=rate, burst=max(1.0, rate))
    say(
        f"rate limit {rate:g}/s: {sustained:.1f} submits/s sustained, {refused} over a provider's "
        f"bucket of the same rate, {got['rate_limited']} answered 429"
    )
    share = sustained / rate
    return BenchRow(
        name=f"collection under a {rate:g}/s platform limit",
        product=f"{sustained:.1f}/s, {refused + got['rate_limited']} x 429",
        reference=f"{rate:g}/s configured",
        ratio=f"{share:.2f} x",
        target=">= 0.9 x, no 429",
        met=share >= 0.9 and refused + got["rate_limited"] == 0,
    )


def _over_bucket(starts: list[float], *, rate: float, burst: float) -> int:
    """How many of these request times a token bucket (the provider's limit) would refuse."""
    tokens, last, refused = burst, starts[0] if starts else 0.0, 0
    for at in starts:
        tokens = min(burst, tokens + (at - last) * rate)
        last = at
        if tokens >= 1.0 - 1e-9:
            tokens -= 1.0
        else:
            refused += 1
    return refused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=Args.samples)
    parser.add_argument("--concurrency", type=int, nargs="+", default=list(Args.concurrency))
    parser.add_argument("--latency", type=float, default=Args.latency)
    parser.add_argument("--workers", type=int, default=Args.workers)
    parser.add_argument("--rate-limit", type=float, default=Args.rate_limit)
    parser.add_argument("--rate-samples", type=int, default=Args.rate_samples)
    parser.add_argument("--profile", action="store_true", help="cProfile the in-process pass")
    parser.add_argument("--json", action="store_true", help="last line: the rows as JSON")
    given = parser.parse_args()
    args = Args(
        samples=given.samples,
        concurrency=tuple(given.concurrency),
        latency=given.latency,
        workers=given.workers,
        rate_limit=given.rate_limit,
        rate_samples=given.rate_samples,
        profile=given.profile,
    )
    say: Callable[[str], None] = (
        (lambda text: print(text, file=sys.stderr, flush=True))
        if given.json
        else (lambda text: print(text, flush=True))
    )
    services, env = _environment(args)
    try:
        rows = _rows(args, env, say)
    finally:
        from django.db import connections

        connections.close_all()
        for service in services:
            service.stop()
    if given.json:
        print(json.dumps([asdict(row) for row in rows]))
    else:
        print(render(rows))


if __name__ == "__main__":
    main()
