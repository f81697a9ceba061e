"""Benchmark: collection throughput against a minimal asyncio client (issue 15, item 4).

A run of `--samples` direct-API samples (platform `openai`, no faults, no screenshots) goes
through the real dispatcher and real Celery workers (Redis broker, PostgreSQL) against the
project's simulator answering after a fixed latency; in the same run a minimal asyncio client
(httpx) makes the same requests to the same simulator at the same concurrency. Printed per
concurrency: samples/s of both, worker and dispatcher CPU per sample, PostgreSQL sessions per
1,000 steps, row writes per sample; then the rate-limit run (a configured submit rate against
plenty of concurrency); then one in-process pass that counts steps and SQL statements per
sample (and, with --profile, where the worker's CPU goes).

Its own database (geo_bench_collection), its own redis-server and simulator. Not a test:
`python bench/collection.py [--samples 1000] [--concurrency 64 128]`; `measure()` for
bench/run_all.py runs the same in a child process and returns the rows.
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
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "geo_collect.settings")

from bench.processes import (
    ROOT,
    Background,
    cpu_seconds,
    fresh_database,
    start_redis,
    start_simulator,
)
from bench.table import BenchRow, render

BENCH_DB = "geo_bench_collection"
WORK = ROOT / "var" / "bench-collection"
PLATFORM = "openai"
ANALYSIS_CAP = 32
TARGET = {"platform": PLATFORM, "device": "desktop", "region": "us", "mode": "web_search"}
TARGET_RATIO = 0.8
TARGET_CPU_MS = 10.0


@dataclass
class Args:
    samples: int = 1000
    concurrency: tuple[int, ...] = (64, 128)
    latency: float = 2.0
    workers: int = 2
    rate_limit: float = 20.0
    rate_samples: int = 400
    profile: bool = False


def measure() -> list[BenchRow]:
    """The whole benchmark in a child process (its own settings and environment)."""
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--json"],
        cwd=ROOT,
        check=True,
        stdout=subprocess.PIPE,
    ).stdout.decode()
    return [BenchRow(**row) for row in json.loads(out.strip().splitlines()[-1])]


# --- set-up ---------------------------------------------------------------------------------


SIMULATOR: list[int] = []  # the simulator's pid, for its CPU per request


def _environment(args: Args) -> tuple[list[Background], dict[str, str]]:
    if WORK.exists():
        shutil.rmtree(WORK)
    (WORK / "var").mkdir(parents=True)
    database = fresh_database(BENCH_DB)
    redis_server, redis_url = start_redis(WORK)
    profile = {"rates": {}, "latency_ms": [args.latency * 1000] * 2, "citation_rate": 0.8}
    simulator, base_url = start_simulator(WORK, profile)
    SIMULATOR.append(simulator.pid)
    env = {
        "DATABASE_URL": database,
        "REDIS_URL": redis_url,
        "GEO_UPSTREAM_BASE_URL": base_url,
        "GEO_VAR_DIR": str(WORK / "var"),
        "GEO_LEASE_SECONDS": "300",
        "GEO_LOG_LEVEL": "WARNING",
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


# --- the reference --------------------------------------------------------------------------


def _reference_requests(
    name: str, samples: int
) -> list[tuple[str, dict[str, Any], dict[str, str]]]:
    """The requests of a run like the product's, planned for a tenant whose concurrency cap
    is 0: the reference asks its questions, the product's dispatcher never claims them."""
    run = _launch(name, samples, tenant="reference", max_concurrency=0)
    return _requests(run)


def _requests(run: Any) -> list[tuple[str, dict[str, Any], dict[str, str]]]:
    """The exact requests the product's connector sends for the run's samples."""
    from connectors.base import SampleRequest
    from connectors.registry import get_connector
    from pipeline.execution import frozen_model

    connector = get_connector(PLATFORM)
    url = f"{connector.config.base_url}/v1/responses"
    headers = {
        "Authorization": f"Bearer {connector.config.api_key}",
        "Accept": "text/event-stream",
    }
    out = []
    for sample in run.samples.select_related("question_revision").order_by("pk"):
        request = SampleRequest(
            sample_id=sample.pk,
            idempotency_key=f"ref:{sample.pk}",
            question=sample.question_revision.text,
            device=sample.device,
            region=sample.region,
            mode=sample.mode,
            model=frozen_model(run, PLATFORM),
        )
        out.append((url, connector.request_body(request), headers))  # type: ignore[attr-defined]
    return out


def reference(
    requests: list[tuple[str, dict[str, Any], dict[str, str]]], concurrency: int
) -> dict[str, float]:
    """A minimal asyncio client: the same requests, `concurrency` in flight, whole bodies read."""
    import httpx

    async def main() -> int:
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        pending = iter(requests)
        done = 0
        async with httpx.AsyncClient(limits=limits, timeout=120) as client:

            async def lane() -> None:
                nonlocal done
                for url, body, headers in pending:
                    try:
                        response = await client.post(url, json=body, headers=headers)
                        await response.aread()
                    except httpx.HTTPError:  # counted as not answered, like a failed sample
                        continue
                    done += response.status_code == 200

            await asyncio.gather(*(lane() for _ in range(concurrency)))
        return done

    cpu, started = time.process_time(), time.perf_counter()
    simulator = cpu_seconds(SIMULATOR[0])
    ok = asyncio.run(main())
    elapsed = time.perf_counter() - started
    return {
        "per_second": ok / elapsed,
        "ok": ok,
        "cpu_ms": (time.process_time() - cpu) * 1000 / len(requests),
        "simulator_cpu_ms": (cpu_seconds(SIMULATOR[0]) - simulator) * 1000 / len(requests),
    }


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


class Waits:
    """Samples pg_stat_activity every 0.5 s: what the product's sessions wait on."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Waits:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        from django.db import connection

        try:
            while not self._stop.wait(0.5):
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT coalesce(wait_event_type || '/' || wait_event, state)"
                        " FROM pg_stat_activity WHERE datname = current_database()"
                        " AND pid <> pg_backend_pid() AND state <> 'idle'"
                    )
                    self.seen.update(row[0] for row in cursor.fetchall())
                self.samples += 1
        finally:
            connection.close()

    def summary(self) -> str:
        n = max(1, self.samples)
        return ", ".join(f"{what} {count / n:.1f}" for what, count in self.seen.most_common(4))


@contextmanager
def _product(
    env: dict[str, str], *, concurrency: int, workers: int, extra: dict[str, str]
) -> Iterator[list[Background]]:
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
    procs.append(Background(dispatcher_command(interval=0.1), WORK / "dispatcher.log", child))
    try:
        yield procs
    finally:
        for proc in procs:
            proc.stop()


def _finished(run_id: Any) -> bool:
    from sampling.models import Run

    return Run.objects.filter(pk=run_id).exclude(finished_at=None).exists()


def _wait(run_id: Any, timeout: float) -> float:
    started = time.perf_counter()
    while not _finished(run_id):
        if time.perf_counter() - started > timeout:
            raise RuntimeError(f"run {run_id} did not finish in {timeout:.0f}s; see {WORK}")
        time.sleep(0.1)
    return time.perf_counter() - started


def _launch(
    name: str, samples: int, *, tenant: str = "bench", max_concurrency: int = 100_000
) -> Any:
    from pipeline.launch import launch_run

    return launch_run(campaign=_campaign(name, samples, tenant, max_concurrency))


def product(
    env: dict[str, str],
    args: Args,
    concurrency: int,
    *,
    name: str,
    samples: int,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One measured run through the dispatcher and workers, after a small warm-up run."""
    with _product(env, concurrency=concurrency, workers=args.workers, extra=extra or {}) as procs:
        warm = _launch(f"{name}-warm", 2 * args.workers)
        _wait(warm.pk, 900)  # worker start-up on a loaded machine
        run = _launch(name, samples)  # planned before the clock starts: planning is item 3
        pids = [p.pid for p in procs] + SIMULATOR
        cpu_before = [cpu_seconds(pid) for pid in pids]
        pg_before = _pg_counters()
        with Waits() as waits:
            elapsed = _wait(run.pk, 60 + samples * args.latency)
        cpu = [cpu_seconds(pid) - before for pid, before in zip(pids, cpu_before, strict=True)]
        pg = {k: v - pg_before[k] for k, v in _pg_counters().items()}
    from sampling.models import Attempt, Sample

    accepted = Sample.objects.filter(run=run, analysis_state="accepted").count()
    return {
        "run": run,
        "per_second": samples / elapsed,
        "elapsed": elapsed,
        "accepted": accepted,
        "worker_cpu_ms": sum(cpu[:-2]) * 1000 / samples,
        "dispatcher_cpu_ms": cpu[-2] * 1000 / samples,
        "simulator_cpu_ms": cpu[-1] * 1000 / samples,
        "pg": pg,
        "waits": waits.summary(),
        "rate_limited": Attempt.objects.filter(sample__run=run, status_code=429).count(),
    }


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
    the dispatcher's claims and each step's statements, separately."""
    from django.conf import settings
    from django.db import connection

    from pipeline.dispatch import Dispatcher
    from pipeline.execution import run_step
    from pipeline.recording import observe_step
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
                    profiler.runcall(
                        observe_step,
                        run_step,
                        sample_id=claim.sample_id,
                        token=claim.token,
                        worker="inline",
                    )
                else:
                    observe_step(
                        run_step, sample_id=claim.sample_id, token=claim.token, worker="inline"
                    )
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
        "steps": steps / samples,
        "worker_sql": worker.count / samples,
        "dispatcher_sql": dispatcher.count / samples,
    }
    if profiler is not None:
        text = io.StringIO()
        order = os.environ.get("SORT", "cumulative")  # or tottime
        pstats.Stats(profiler, stream=text).sort_stats(order).print_stats(45)
        result["profile"] = text.getvalue()
    return result


# --- rows ----------------------------------------------------------------------------------


def _rows(args: Args, env: dict[str, str], say: Callable[[str], None]) -> list[BenchRow]:
    rows: list[BenchRow] = []
    # First, so its steps per sample are known for the sessions per 1,000 steps below.
    inline = inline_pass(64, profile=args.profile)
    for concurrency in args.concurrency:
        ref = reference(_reference_requests(f"ref{concurrency}", args.samples), concurrency)
        say(f"C={concurrency} reference: {ref['per_second']:.1f}/s ({ref['ok']} ok, "
            f"{ref['cpu_ms']:.2f} ms CPU per request, simulator "
            f"{ref['simulator_cpu_ms']:.1f} ms)")  # fmt: skip
        got = product(env, args, concurrency, name=f"c{concurrency}", samples=args.samples)
        pg = got["pg"]
        steps = inline["steps"] * args.samples
        say(
            f"C={concurrency} product: {got['per_second']:.1f}/s in {got['elapsed']:.1f}s "
            f"({got['accepted']} accepted), worker CPU {got['worker_cpu_ms']:.1f} ms/sample, "
            f"dispatcher CPU {got['dispatcher_cpu_ms']:.1f} ms/sample, "
            f"simulator CPU {got['simulator_cpu_ms']:.1f} ms/sample, "
            f"{pg['sessions'] * 1000 / steps:.0f} PostgreSQL sessions per 1,000 steps, "
            f"{pg['commits'] / args.samples:.1f} commits and {pg['writes'] / args.samples:.1f} "
            f"row writes per sample; waits per 0.5 s sample: {got['waits']}"
        )
        ratio = got["per_second"] / ref["per_second"]
        rows.append(
            BenchRow(
                name=f"collection {args.samples} samples, C={concurrency}",
                product=f"{got['per_second']:.1f} samples/s",
                reference=f"{ref['per_second']:.1f} samples/s (asyncio)",
                ratio=f"{ratio:.2f} x",
                target=f">= {TARGET_RATIO} x",
                met=ratio >= TARGET_RATIO,
            )
        )
        rows.append(
            BenchRow(
                name=f"collection worker CPU per sample, C={concurrency}",
                product=f"{got['worker_cpu_ms']:.1f} ms",
                reference=f"{ref['cpu_ms']:.2f} ms (asyncio)",
                ratio="",
                target=f"< {TARGET_CPU_MS:g} ms",
                met=got["worker_cpu_ms"] < TARGET_CPU_MS,
            )
        )
    rows.append(_rate_row(args, env, say))
    say(
        f"per sample (in-process pass of 64): {inline['steps']:.2f} steps, "
        f"{inline['worker_sql']:.1f} SQL statements in steps, "
        f"{inline['dispatcher_sql']:.1f} in claims"
    )
    if "profile" in inline:
        say(inline["profile"])
    return rows


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
        (lambda text: print(text, file=sys.stderr)) if given.json else print
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
