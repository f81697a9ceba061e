"""Benchmark: run status, the auditable report and the admin pages at 1,000,000 samples.

`measure() -> list[BenchRow]` (bench/table.py) for bench/run_all.py; `python
bench/status_report.py` prints the table alone. PostgreSQL only. Not a test.

The fixture lives in its own database (GEO_BENCH_COUNTERS_DB, default geo_bench_counters) and is
built once with INSERT ... SELECT generate_series (about a minute), then reused:

* campaign "scale" with 10,000 questions and a finished 1,000,000-sample run over five platforms
  (90% succeeded, 5% failed, 3% invalid, 2% still pending): one completed capture per
  collected sample, three mention rows (brand and two competitors) and two citations per
  succeeded sample, in analysis revision 1;
* campaign "small" with a 10,000-sample run of the same shape, for run_status at 10k.

Figures: run_status (median of 25 calls) at 10k vs 1M; build_run_report at 1M against a raw
GROUP BY over the same rows (samples, mentions and citations, one query each); the report's
Python peak memory (tracemalloc); and the run list, run page, sample list and campaign page
through the admin (median of 5 requests, logged in as a superuser).

The fixture's analysis revision names an analyser version that is not the current one, so the
report's second count (re-deriving mentions from answer text, capped at 10,000 samples whatever
N is: analysis/second_count.py) is skipped with its reason; its cost does not grow with N.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "geo_collect.settings")

import django

django.setup()

import psycopg  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from bench.table import BenchRow, render  # noqa: E402

DB_NAME = os.environ.get("GEO_BENCH_COUNTERS_DB", "geo_bench_counters")
BIG, SMALL = 1_000_000, 10_000
QUESTIONS = 10_000
PLATFORMS = ("openai", "gemini", "perplexity", "collector", "anthropic")
BATCH = 500
BRAND, COMPETITORS = "Acme", ("Globex", "Initech")
DOMAINS = [f"site{i}.example" for i in range(39)] + ["acme.com"]


# --- the database ------------------------------------------------------------------------------


@contextmanager
def _bench_database() -> Iterator[None]:
    """Point Django's default connection at the bench database (created and migrated if
    needed) for the duration, then back."""
    settings = connection.settings_dict
    if connection.vendor != "postgresql":
        raise SystemExit("bench/status_report.py needs PostgreSQL (DATABASE_URL)")
    previous = settings["NAME"]
    admin_dsn = (
        f"host={settings['HOST'] or '127.0.0.1'} port={settings['PORT'] or 5432} "
        f"user={settings['USER']} dbname=postgres"
        + (f" password={settings['PASSWORD']}" if settings["PASSWORD"] else "")
    )
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DB_NAME]).fetchone()
        if not exists:
            admin.execute(f'CREATE DATABASE "{DB_NAME}"')
    connection.close()
    settings["NAME"] = DB_NAME
    try:
        call_command("migrate", verbosity=0)
        yield
    finally:
        connection.close()
        settings["NAME"] = previous


def _sql(statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(statement, params or [])
        return list(cursor.fetchall()) if cursor.description else []


# --- the fixture -------------------------------------------------------------------------------


def _campaign(name: str) -> Any:
    from sampling.models import Brand, Campaign, Question, QuestionRevision
    from tenancy.models import Tenant

    tenant, _ = Tenant.objects.get_or_create(slug="bench-scale", defaults={"name": "Bench"})
    brand, _ = Brand.objects.get_or_create(
        tenant=tenant, name=BRAND, defaults={"domains": ["acme.com"]}
    )
    campaign = Campaign.objects.create(tenant=tenant, name=name, brand=brand)
    questions = Question.objects.bulk_create(
        Question(campaign=campaign, position=i) for i in range(QUESTIONS)
    )
    QuestionRevision.objects.bulk_create(
        QuestionRevision(question=q, revision_no=1, text=f"Which product is best? ({q.position})")
        for q in questions
    )
    _sql(
        "UPDATE sampling_question q SET current_revision_id = r.id "
        "FROM sampling_questionrevision r WHERE r.question_id = q.id AND q.campaign_id = %s",
        [campaign.pk],
    )
    return campaign


def _run(campaign: Any, n: int) -> Any:
    from analysis.models import AnalysisRevision
    from sampling.models import Run
    from sampling.snapshots import EntitySnapshot, RunConfig

    config = RunConfig(
        tenant=campaign.tenant.slug,
        campaign_id=campaign.pk,
        campaign_name=campaign.name,
        brand=EntitySnapshot(name=BRAND, domains=("acme.com",)),
        competitors=tuple(EntitySnapshot(name=c) for c in COMPETITORS),
    )
    run = Run.objects.create(
        tenant=campaign.tenant,
        campaign=campaign,
        config_snapshot=config.to_json(),
        planned_samples=n,
    )
    revision = AnalysisRevision.objects.create(
        run=run, number=1, analyser="rules", analyser_version="bench-fixture", expected=n
    )
    _fill(run, revision.pk, campaign, n)
    return run


def _fill(run: Any, revision_id: int, campaign: Any, n: int) -> None:
    per_platform = QUESTIONS * len(PLATFORMS)
    first_rev = _sql(
        "SELECT MIN(r.id) FROM sampling_questionrevision r JOIN sampling_question q "
        "ON q.id = r.question_id WHERE q.campaign_id = %s",
        [campaign.pk],
    )[0][0]
    platforms = "ARRAY[" + ", ".join(f"'{p}'" for p in PLATFORMS) + "]"
    _sql(
        "INSERT INTO sampling_batch (run_id, index, platform, size) "
        "SELECT %s, b, 'mixed', %s FROM generate_series(0, %s) b",
        [run.pk, BATCH, (n - 1) // BATCH],
    )
    # i %% 100: 0-89 succeeded, 90-94 failed, 95-97 invalid, 98-99 pending.
    _sql(
        f"""
INSERT INTO sampling_sample (
  run_id, batch_id, tenant_id, question_revision_id, platform, device, region, mode,
  repeat_index, submission_state, collection_state, evidence_state, analysis_state, step,
  queue_state, priority, due_at, lease_owner, fencing_token, attempts, claims, upstream_id,
  failure_reason, validity, validity_reason, evidence_reason, analysis_reason, updated_at,
  attempts_before_resume, resumes)
SELECT %(run)s, b.id, %(tenant)s, %(first_rev)s + (i %% {QUESTIONS}),
  ({platforms})[1 + (i / {QUESTIONS}) %% {len(PLATFORMS)}], 'desktop', 'us', 'web_search',
  i / {per_platform},
  CASE WHEN i %% 100 < 98 THEN 'accepted' ELSE 'planned' END,
  CASE WHEN i %% 100 < 90 OR i %% 100 BETWEEN 95 AND 97 THEN 'completed'
       WHEN i %% 100 < 95 THEN 'failed' ELSE 'queued' END,
  CASE WHEN i %% 100 < 90 OR i %% 100 BETWEEN 95 AND 97 THEN 'stored'
       WHEN i %% 100 < 95 THEN 'failed' ELSE 'pending' END,
  CASE WHEN i %% 100 < 90 THEN 'accepted' WHEN i %% 100 < 98 THEN 'failed' ELSE 'pending' END,
  CASE WHEN i %% 100 < 98 THEN 'none' ELSE 'submit' END,
  CASE WHEN i %% 100 < 98 THEN 'done' ELSE 'ready' END,
  0, now(), '', 1, 1, 0, 'up-' || i,
  CASE WHEN i %% 100 BETWEEN 90 AND 94 THEN 'auth_error: refused' ELSE '' END,
  CASE WHEN i %% 100 < 90 THEN 'valid' WHEN i %% 100 BETWEEN 95 AND 97 THEN 'invalid' ELSE '' END,
  CASE WHEN i %% 100 BETWEEN 95 AND 97 THEN 'login_wall' ELSE '' END,
  '', '', now(), 0, 0
FROM generate_series(0, %(last)s) i
JOIN sampling_batch b ON b.run_id = %(run)s AND b.index = i / {BATCH}
""",
        {"run": run.pk, "tenant": run.tenant_id, "first_rev": first_rev, "last": n - 1},
    )
    _sql(
        """
INSERT INTO evidence_capture (sample_id, run_id, revision, upstream_id, collection_state,
  answer_text, warnings, upstream_cost_currency, captured_at)
SELECT s.id, s.run_id, 0, s.upstream_id, 'completed', 'Acme and Globex are good.', '[]', '',
  now()
FROM sampling_sample s WHERE s.run_id = %s AND s.collection_state = 'completed'
""",
        [run.pk],
    )
    entities = [(BRAND, True), *((c, False) for c in COMPETITORS)]
    for index, (entity, is_brand) in enumerate(entities):
        _sql(
            f"""
INSERT INTO analysis_mention (entity, is_brand, mentioned, count, rank, capture_id, sample_id,
  analyser, analyser_version, context, matched, occurrences, recommended, sentence, sentiment,
  unsure, revision_id, platform, question_revision_id, brand_mentioned, brand_rank)
SELECT %s, %s, (s.id + {index}) %% 3 <> 0, 1, 1 + (s.id + {index}) %% 3, c.id, s.id,
  'rules', 'bench-fixture', 'listed', 1, '[]', s.id %% 4 = 0, '', 'neutral', '', %s,
  s.platform, s.question_revision_id,
  CASE WHEN {index} > 0 THEN s.id %% 3 <> 0 END, CASE WHEN {index} > 0 THEN 1 + s.id %% 3 END
FROM sampling_sample s JOIN evidence_capture c ON c.sample_id = s.id
WHERE s.run_id = %s AND s.analysis_state = 'accepted'
""",
            [entity, is_brand, revision_id, run.pk],
        )
    domains = "ARRAY[" + ", ".join(f"'{d}'" for d in DOMAINS) + "]"
    _sql(
        f"""
INSERT INTO evidence_citation (position, url, normalized_url, domain, title, capture_id,
  sample_id, run_id, platform, question_revision_id)
SELECT p, 'https://' || d || '/page', 'https://' || d || '/page', d, '', c.id,
  s.id, s.run_id, s.platform, s.question_revision_id
FROM sampling_sample s JOIN evidence_capture c ON c.sample_id = s.id,
  generate_series(0, 1) p,
  LATERAL (SELECT ({domains})[1 + (s.id + p * 7) %% {len(DOMAINS)}] AS d) dom
WHERE s.run_id = %s AND s.analysis_state = 'accepted'
""",
        [run.pk],
    )
    _sql("UPDATE sampling_run SET finished_at = now() WHERE id = %s", [run.pk])


def _fixture() -> tuple[Any, Any]:
    from django.contrib.auth import get_user_model

    from sampling.models import Run

    runs = {r.campaign.name: r for r in Run.objects.select_related("campaign")}
    if "scale" not in runs or "small" not in runs:
        started = time.perf_counter()
        _sql("TRUNCATE sampling_tenant, sampling_samplecount CASCADE")
        small = _run(_campaign("small"), SMALL)
        big = _run(_campaign("scale"), BIG)
        _sql("VACUUM ANALYZE")
        print(f"fixture built in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        runs = {"scale": big, "small": small}
    user_model = get_user_model()
    if not user_model.objects.filter(username="bench").exists():
        user_model.objects.create_superuser("bench", "bench@example.com", "bench-password")
    return runs["small"], runs["scale"]


# --- measuring ---------------------------------------------------------------------------------


def _median_ms(fn: Callable[[], Any], times: int) -> float:
    fn()  # warm
    samples = []
    for _ in range(times):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def _raw_group_by(run: Any) -> None:
    _sql(
        "SELECT platform, question_revision_id, collection_state, analysis_state, validity, "
        "queue_state, COUNT(*) FROM sampling_sample WHERE run_id = %s GROUP BY 1, 2, 3, 4, 5, 6",
        [run.pk],
    )
    _sql(
        "SELECT s.platform, s.question_revision_id, m.entity, COUNT(*) FILTER (WHERE m.mentioned)"
        " FROM analysis_mention m JOIN sampling_sample s ON s.id = m.sample_id "
        "WHERE s.run_id = %s GROUP BY 1, 2, 3",
        [run.pk],
    )
    _sql(
        "SELECT s.platform, s.question_revision_id, ci.normalized_url, COUNT(*) "
        "FROM evidence_citation ci JOIN evidence_capture c ON c.id = ci.capture_id "
        "JOIN sampling_sample s ON s.id = c.sample_id WHERE s.run_id = %s GROUP BY 1, 2, 3",
        [run.pk],
    )


def _admin_pages(big: Any) -> dict[str, str]:
    return {
        "run list": "/admin/sampling/run/",
        "run page": f"/admin/sampling/run/{big.pk}/change/",
        "sample list": f"/admin/sampling/sample/?run={big.pk}",
        "campaign page": f"/admin/sampling/campaign/{big.campaign_id}/change/",
    }


def _admin_rows(big: Any) -> list[BenchRow]:
    from django.contrib.auth import get_user_model
    from django.test import Client

    client = Client(SERVER_NAME="localhost")
    client.force_login(get_user_model().objects.get(username="bench"))
    rows = []
    for name, url in _admin_pages(big).items():

        def get(url: str = url) -> None:
            response = client.get(url, secure=True)
            if response.status_code != 200:
                raise RuntimeError(f"{url}: HTTP {response.status_code}")

        ms = _median_ms(get, 5)
        rows.append(
            BenchRow(
                f"admin {name} at 1M samples, 10k questions",
                f"{ms:.0f} ms",
                "",
                "",
                "<= 300 ms",
                ms <= 300,
            )
        )
    return rows


def measure() -> list[BenchRow]:
    from analysis.reports import build_run_report
    from sampling.selectors import run_status

    with _bench_database():
        small, big = _fixture()
        small_ms = _median_ms(lambda: run_status(run_id=small.pk), 25)
        big_ms = _median_ms(lambda: run_status(run_id=big.pk), 25)
        started = time.perf_counter()
        build_run_report(run_id=big.pk)
        report_s = time.perf_counter() - started
        started = time.perf_counter()
        _raw_group_by(big)
        raw_s = time.perf_counter() - started
        tracemalloc.start()
        build_run_report(run_id=big.pk)
        _current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        peak_mib = peak / 2**20
        rows = [
            BenchRow(
                "run_status 1M vs 10k samples",
                f"{big_ms:.1f} ms",
                f"{small_ms:.1f} ms",
                f"{big_ms / small_ms:.2f} x",
                "<= 2 x and < 50 ms",
                big_ms <= 2 * small_ms and big_ms < 50,
            ),
            BenchRow(
                "report 1M samples vs raw GROUP BY",
                f"{report_s:.2f} s",
                f"{raw_s:.2f} s",
                f"{report_s / raw_s:.2f} x",
                "< 5 s",
                report_s < 5,
            ),
            BenchRow(
                "report 1M samples, Python peak memory",
                f"{peak_mib:.0f} MiB",
                "",
                "",
                "< 200 MiB",
                peak_mib < 200,
            ),
            *_admin_rows(big),
        ]
    return rows


if __name__ == "__main__":
    print(render(measure()))
