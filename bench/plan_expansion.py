"""Benchmark: expanding a 100,000-sample plan (launch_run) on the configured database.

Run with `make bench` (PostgreSQL) or `python bench/plan_expansion.py` (embedded SQLite).
Creates a throw-away database, measures, and prints samples per second. Not a test.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "geo_collect.settings")

import django

django.setup()

from django.db import connection  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402

QUESTIONS, REPEATS = 1250, 10
TARGETS = [
    {"platform": "collector", "device": d, "region": r, "mode": "web_search"}
    for d in ("desktop", "mobile")
    for r in ("us", "cn", "de", "jp")
]


def main() -> None:
    setup_test_environment()
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        from billing.services import ensure_default_price_version, top_up
        from pipeline.launch import launch_run
        from sampling.models import Tenant
        from sampling.planning import parse_campaign_spec
        from sampling.services import save_campaign

        data = {
            "tenant": "bench",
            "name": "expansion",
            "brand": {"name": "Acme", "aliases": [], "domains": []},
            "questions": [
                f"Benchmark question {i}: which product is best?" for i in range(QUESTIONS)
            ],
            "targets": TARGETS,
            "repeats": REPEATS,
        }
        spec = parse_campaign_spec(data)
        Tenant.objects.get_or_create(slug=spec.tenant, defaults={"name": spec.tenant})
        campaign = save_campaign(spec=spec)
        version = ensure_default_price_version()  # launch holds the quote: fund the tenant
        top_up(
            tenant=campaign.tenant,
            amount=10**12,
            currency=version.currency,
            idempotency_key="bench",
        )
        started = time.perf_counter()
        run = launch_run(campaign=campaign)
        elapsed = time.perf_counter() - started
        print(
            f"{connection.vendor}: expanded {run.planned_samples} samples in "
            f"{run.batches.count()} batches in {elapsed:.2f}s "
            f"({run.planned_samples / elapsed:,.0f} samples/s)"
        )
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
