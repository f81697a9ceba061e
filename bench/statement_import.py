"""Benchmark: a 400,000-row provider statement through the web and a worker (issue 28 point 8:
such a statement ran 300 s in a gunicorn worker, which was killed).

`measure() -> list[BenchRow]` (bench/table.py) for bench/run_all.py;
`python bench/statement_import.py [--rows N]` prints the table alone. Not a test.

The statement (36 bytes a row, 14.4 MB at 400,000 rows, as found) is uploaded through the
real web stack in this process (Django's test client: every middleware, the multipart upload
handler spooling to disk, the console's import view), as platform finance. A worker process
(`manage.py shell` calling the Celery task's function, billing.tasks.import_statement, as a
worker does) imports it; meanwhile this process GETs the API's progress of the import and the
console's import page in turn and times each answer. Figures: the upload request, the
import from queued to done (the row's timestamps), and the GET latency while it ran (median
and worst). Sizes: GEO_BENCH_STATEMENT_ROWS (default 400,000).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common
from bench.table import BenchRow

UPLOAD_TARGET_S = 5.0
IMPORT_TARGET_S = 300.0  # what killed the gunicorn worker before
GET_TARGET_MS = 500.0


def _statement(path: Path, rows: int) -> None:
    with path.open("w") as out:
        out.write("upstream_id,amount,currency,occurred_at\n")
        for n in range(rows):
            out.write(f"b{n:07d},0.{n % 100:02d},USD,2026-11-11T02:00Z\n")


def _worker(import_id: int) -> subprocess.Popen[bytes]:
    code = f"from billing.tasks import import_statement; print(import_statement({import_id}))"
    return subprocess.Popen(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=common.ROOT,
        env=os.environ.copy(),  # DATABASE_URL points at the bench database
    )


def _client():  # type: ignore[no-untyped-def]
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.test.utils import setup_test_environment

    from tenancy.services import grant_platform_finance

    setup_test_environment()  # the test client's host name is allowed
    grant_platform_finance(username="bench-platform-fin")
    client = Client()
    client.force_login(get_user_model().objects.get(username="bench-platform-fin"))
    return client


def measure() -> list[BenchRow]:
    rows = common.env_int("GEO_BENCH_STATEMENT_ROWS", 400_000)
    with common.bench_database():
        from django.urls import reverse

        from billing.models import StatementImport

        client = _client()
        path = common.ROOT / "var" / "bench-statement.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        _statement(path, rows)
        common.log(f"statement: {rows:,} rows, {path.stat().st_size:,} bytes")
        with path.open("rb") as upload, common.timed() as posted:
            response = client.post(
                reverse("admin:billing_statement_import"),
                {"provider": "collector", "file": upload},
            )
        assert response.status_code == 302, response.status_code
        job = StatementImport.objects.get()
        api_url = reverse("api:statement-import", args=[job.pk])
        page_url = reverse("admin:billing_statement_import_status", args=[job.pk])
        worker = _worker(job.pk)
        latencies: list[float] = []
        while worker.poll() is None:
            for url in (api_url, page_url):
                started = time.perf_counter()
                answer = client.get(url)
                latencies.append((time.perf_counter() - started) * 1000)
                assert answer.status_code == 200, (url, answer.status_code)
            time.sleep(0.5)
        job.refresh_from_db()
        path.unlink()
        assert job.status == "done", (job.status, job.errors[:3])
        assert job.started_at and job.finished_at
        took = (job.finished_at - job.queued_at).total_seconds()
        common.log(
            f"import {job.status}: {job.imported:,} rows in {took:.1f} s; GETs: {len(latencies)}"
        )
    median, worst = statistics.median(latencies), max(latencies)
    return [
        BenchRow(
            name=f"statement upload, {rows:,} rows ({path.name}), console POST to its answer",
            product=f"{posted.seconds:.2f} s",
            reference="",
            ratio="",
            target=f"< {UPLOAD_TARGET_S:.0f} s",
            met=posted.seconds < UPLOAD_TARGET_S,
        ),
        BenchRow(
            name=f"statement import in the worker, {rows:,} rows, queued to done",
            product=f"{took:.1f} s ({rows / took:,.0f} rows/s)",
            reference="300 s, then killed (in the web, before)",
            ratio="",
            target=f"< {IMPORT_TARGET_S:.0f} s",
            met=took < IMPORT_TARGET_S,
        ),
        BenchRow(
            name=f"API / console GET while it imports ({len(latencies)} GETs)",
            product=f"median {median:.0f} ms, worst {worst:.0f} ms",
            reference="",
            ratio="",
            target=f"< {GET_TARGET_MS:.0f} ms worst",
            met=worst < GET_TARGET_MS,
        ),
    ]


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "geo_collect.settings")
    common.run_alone(measure, __doc__ or "", {"--rows": ("GEO_BENCH_STATEMENT_ROWS", 400_000)})
