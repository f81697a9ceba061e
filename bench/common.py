"""What every benchmark shares (bench/run_all.py): Django set-up, a throw-away bench database,
timing, peak memory, a funded campaign of N samples, and the ratio rows of the one table.

A benchmark module exposes `measure() -> list[BenchRow]` and calls `setup_django()` and
`bench_database()` itself, so it also runs alone (`python bench/plan.py`); under run_all.py
the database already exists and `bench_database()` only re-enters it (one migration for the
whole suite). Sizes come from environment variables (`GEO_BENCH_*`, read with `env_int`), so
`make bench` and a single module take the same knobs. Benchmarks are not tests: nothing here
asserts a time.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.table import BenchRow, render  # noqa: E402  (needs ROOT on sys.path)

MIB = 1024 * 1024
BENCH_TENANT = "bench"
# Eight collector targets, as a customer tracking two devices in four regions would.
TARGETS = [
    {"platform": "collector", "device": device, "region": region, "mode": "web_search"}
    for device in ("desktop", "mobile")
    for region in ("us", "cn", "de", "jp")
]

_inside = 0  # bench_database() nesting depth


def log(message: str) -> None:
    """Progress and detail lines go to stderr; stdout carries only the table."""
    print(message, file=sys.stderr, flush=True)


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def run_alone(
    measure: Callable[[], list[BenchRow]], doc: str, options: dict[str, tuple[str, int]]
) -> None:
    """One benchmark from the command line: each option (`--samples N`) sets its environment
    variable (`options`: flag -> (variable, default)); prints the module's table."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    for flag, (variable, default) in options.items():
        parser.add_argument(flag, type=int, help=f"{variable}, default {default:,}")
    given = vars(parser.parse_args())
    for flag, (variable, _) in options.items():
        value = given[flag.removeprefix("--").replace("-", "_")]
        if value is not None:
            os.environ[variable] = str(value)
    print(render(measure()))


def setup_django() -> None:
    """Configure Django (django.setup() is idempotent). DEBUG off: no query log growing with N."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "geo_collect.settings")
    import django
    from django.conf import settings

    django.setup()
    settings.DEBUG = False


@contextmanager
def bench_database() -> Iterator[str]:
    """A fresh database `<DATABASE_URL's name>_bench`, migrated, dropped afterwards; yields its
    name. Processes a benchmark starts (workers, dispatcher) inherit DATABASE_URL pointing at
    it. Re-entrant: inside another bench_database() it yields the same database."""
    global _inside
    setup_django()
    from django.db import connection

    if _inside:
        _inside += 1
        try:
            yield str(connection.settings_dict["NAME"])
        finally:
            _inside -= 1
        return
    connection.settings_dict.setdefault("TEST", {})
    connection.settings_dict["TEST"]["NAME"] = f"{connection.settings_dict['NAME']}_bench"
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    name = str(connection.settings_dict["NAME"])
    old_url = os.environ.get("DATABASE_URL")
    if old_url:
        os.environ["DATABASE_URL"] = _with_database(old_url, name)
    _inside = 1
    try:
        yield name
    finally:
        _inside = 0
        if old_url:
            os.environ["DATABASE_URL"] = old_url
        connection.creation.destroy_test_db(old_name, verbosity=0)


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


@dataclass
class Timing:
    seconds: float = 0.0


@contextmanager
def timed() -> Iterator[Timing]:
    """`with timed() as t: ...` then `t.seconds` (wall clock, perf_counter)."""
    timing = Timing()
    started = time.perf_counter()
    try:
        yield timing
    finally:
        timing.seconds = time.perf_counter() - started


@dataclass
class Peak:
    mib: float = 0.0


@contextmanager
def python_peak() -> Iterator[Peak]:
    """Peak Python heap (tracemalloc) inside the block, in MiB. Tracing slows Python code, so
    time a block and measure its memory in separate passes."""
    peak = Peak()
    started_here = not tracemalloc.is_tracing()
    if started_here:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    try:
        yield peak
    finally:
        peak.mib = (tracemalloc.get_traced_memory()[1] - base) / MIB
        if started_here:
            tracemalloc.stop()


def best_of(repeats: int, run: Callable[[], float]) -> float:
    """The fastest of `repeats` runs of `run` (which returns its own seconds)."""
    return min(run() for _ in range(max(1, repeats)))


def speed_row(name: str, product_s: float, reference_s: float, target: float, n: int) -> BenchRow:
    """A row for "the product does the same work on `n` items at >= target x the reference's
    speed": ratio = reference time / product time (1.0: as fast; 0.5: twice as slow)."""
    ratio = reference_s / product_s if product_s else 0.0
    log(f"{name}: product {product_s:.2f} s, reference {reference_s:.2f} s, {ratio:.2f} x")
    return BenchRow(
        name=name,
        product=f"{product_s:.2f} s ({n / product_s:,.0f}/s)",
        reference=f"{reference_s:.2f} s ({n / reference_s:,.0f}/s)",
        ratio=f"{ratio:.2f} x",
        target=f">= {target} x",
        met=ratio >= target,
    )


def funded_campaign(
    *, samples: int, name: str, repeats: int = 25, targets: list[dict[str, str]] | None = None
) -> Any:
    """A saved campaign of `samples` samples (questions x targets x repeats; `samples` must be
    a multiple of targets x repeats) for the bench tenant, funded to launch. Returns it."""
    from billing.services import ensure_default_price_version, top_up
    from sampling.planning import parse_campaign_spec
    from sampling.services import save_campaign
    from tenancy.models import Tenant

    targets = targets or TARGETS
    per_question = len(targets) * repeats
    if samples % per_question:
        raise ValueError(f"{samples} samples is not a multiple of {per_question}")
    data = {
        "tenant": BENCH_TENANT,
        "name": name,
        "brand": {"name": "Acme", "aliases": [], "domains": []},
        "questions": [
            f"Benchmark question {i}: which product is best?"
            for i in range(samples // per_question)
        ],
        "targets": targets,
        "repeats": repeats,
    }
    tenant, _ = Tenant.objects.get_or_create(slug=BENCH_TENANT, defaults={"name": "bench"})
    campaign = save_campaign(spec=parse_campaign_spec(data))
    version = ensure_default_price_version()
    top_up(tenant=tenant, amount=10**12, currency=version.currency, idempotency_key=f"bench:{name}")
    return campaign


def sql(statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    """Run one statement on the bench connection (autocommit); rows if it returns any."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return list(cursor.fetchall()) if cursor.description else []


def vacuum(table: str = "sampling_sample") -> None:
    """VACUUM ANALYZE and a CHECKPOINT, between measurements: each one starts with no dead rows
    and no dirty pages left by the one before."""
    sql(f"VACUUM ANALYZE {table}")
    sql("CHECKPOINT")


def drop_samples(run_ids: list[Any]) -> None:
    """Delete these runs' samples and vacuum, so the next benchmark sees its own work only.

    Foreign-key triggers are off for the delete (session_replication_role): with the nine
    tables that reference a sample checked row by row, a million-sample delete takes minutes.
    So only for runs whose samples nothing references yet (no attempt, capture or ledger entry:
    planned or claimed, never executed), and only on the throw-away bench database."""
    sql("SET session_replication_role = replica")
    try:
        sql("DELETE FROM sampling_sample WHERE run_id = ANY(%s)", [run_ids])
    finally:
        sql("RESET session_replication_role")
    vacuum()
