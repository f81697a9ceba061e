"""Benchmark: claiming N due samples through the product's claim path against a raw
`UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED LIMIT n)` batch claim, same run.

The product: `sampling.leases.claim_ready` called exactly as the dispatcher calls it
(pipeline/dispatch.py: one platform, one step, one tenant, a limit), batch after batch until
nothing is due. The reference: the bare batch claim of the same platform, step and tenant,
one autocommit statement per batch. Both
claim the same N samples of one launched run in batches of the same size; the reference goes
first on the freshly vacuumed table, the product after every claim is undone and the table
vacuumed again. Not a test.

    python bench/claim.py [--samples N] [--batch B]
    (GEO_BENCH_CLAIM_SAMPLES, default 100,000; GEO_BENCH_CLAIM_BATCH, default 100)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common
from bench.table import BenchRow

DEFAULT_SAMPLES = 100_000
DEFAULT_BATCH = 100
TARGET = 0.8  # the claim path should cost little more than the bare statement

RAW_CLAIM = """
UPDATE sampling_sample
   SET queue_state = 'leased', lease_until = statement_timestamp() + interval '120 seconds',
       lease_owner = 'reference', fencing_token = fencing_token + 1, claims = claims + 1
 WHERE id IN (SELECT id FROM sampling_sample
               WHERE queue_state = 'ready' AND platform = 'collector' AND step = 'submit'
                 AND tenant_id = %s AND due_at <= statement_timestamp()
               ORDER BY due_at LIMIT %s FOR UPDATE SKIP LOCKED)
RETURNING id, fencing_token"""

UNDO_CLAIMS = """
UPDATE sampling_sample
   SET queue_state = 'ready', lease_until = NULL, lease_owner = '', fencing_token = 0, claims = 0
 WHERE run_id = %s"""


def measure() -> list[BenchRow]:
    samples = common.env_int("GEO_BENCH_CLAIM_SAMPLES", DEFAULT_SAMPLES)
    batch = common.env_int("GEO_BENCH_CLAIM_BATCH", DEFAULT_BATCH)
    with common.bench_database():
        from pipeline.launch import launch_run

        run = launch_run(campaign=common.funded_campaign(samples=samples, name=f"claim {samples}"))
        common.vacuum()
        with common.timed() as reference:
            _check(_raw_claims(batch, run.tenant_id), samples, "the raw claim")
        common.sql(UNDO_CLAIMS, [run.pk])
        common.vacuum()
        with common.timed() as product:
            _check(_product_claims(batch, run.tenant_id), samples, "claim_ready")
        common.drop_samples([run.pk])
    name = f"claim {samples:,} due samples, batches of {batch} (claim_ready) vs raw SKIP LOCKED"
    return [common.speed_row(name, product.seconds, reference.seconds, TARGET, samples)]


def _product_claims(batch: int, tenant_id: int) -> int:
    from django.conf import settings

    from sampling.leases import claim_ready
    from sampling.models import Step

    claimed = 0
    while mine := claim_ready(
        platform="collector",
        steps=(Step.SUBMIT,),
        limit=batch,
        owner="bench",
        lease_seconds=settings.GEO_LEASE_SECONDS,
        only_tenant=tenant_id,
    ):
        claimed += len(mine)
    return claimed


def _raw_claims(batch: int, tenant_id: int) -> int:
    claimed = 0
    while rows := common.sql(RAW_CLAIM, [tenant_id, batch]):
        claimed += len(rows)
    return claimed


def _check(claimed: int, expected: int, what: str) -> None:
    if claimed != expected:
        raise RuntimeError(f"{what} claimed {claimed} samples, not {expected}")


if __name__ == "__main__":
    common.run_alone(
        measure,
        __doc__ or "",
        {
            "--samples": ("GEO_BENCH_CLAIM_SAMPLES", DEFAULT_SAMPLES),
            "--batch": ("GEO_BENCH_CLAIM_BATCH", DEFAULT_BATCH),
        },
    )
