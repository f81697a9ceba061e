"""Benchmark: planning a run of N samples against a raw COPY of the same rows, same run.

The product: `launch_run` as an operator calls it (the plan, its batches and samples, the
quote and the money hold, one transaction; sampling/expansion.py writes the samples with one
INSERT ... SELECT on PostgreSQL). The reference: the same rows (every column, the values the
product writes) rendered beforehand into a file and streamed with COPY into the same table,
in one transaction. Each starts from a vacuumed table after a CHECKPOINT; the rows are
deleted after each. Not a test.

    python bench/plan.py [--samples N]      (GEO_BENCH_PLAN_SAMPLES, default 1,000,000)
"""

from __future__ import annotations

import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import IO, Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common
from bench.table import BenchRow

DEFAULT_SAMPLES = 1_000_000
TARGET = 0.5  # issue 15: plan at >= 0.5 x a raw COPY of the same rows


def measure() -> list[BenchRow]:
    samples = common.env_int("GEO_BENCH_PLAN_SAMPLES", DEFAULT_SAMPLES)
    with common.bench_database():
        from pipeline.launch import launch_run

        with common.timed() as setup:
            campaign = common.funded_campaign(samples=samples, name=f"plan {samples}", repeats=50)
        common.log(f"plan: campaign of {samples:,} samples saved in {setup.seconds:.1f} s")
        reference_s, reference_run = _raw_copy(campaign)
        common.drop_samples([reference_run])
        with common.timed() as product:
            run = launch_run(campaign=campaign)
        written = common.sql("SELECT count(*) FROM sampling_sample WHERE run_id = %s", [run.pk])
        if written[0][0] != samples:
            raise RuntimeError(f"launch_run wrote {written[0][0]} samples, not {samples}")
        heap, indexes = common.sql(
            "SELECT pg_table_size('sampling_sample'), pg_indexes_size('sampling_sample')"
        )[0]
        common.log(
            f"plan: {run.batches.count()} batches; sampling_sample {heap / common.MIB:,.0f} MiB "
            f"+ indexes {indexes / common.MIB:,.0f} MiB for {samples:,} samples"
        )
        common.drop_samples([run.pk])
    name = f"plan {samples:,} samples (launch_run) vs raw COPY"
    return [common.speed_row(name, product.seconds, reference_s, TARGET, samples)]


def _raw_copy(campaign: Any) -> tuple[float, int]:
    """COPY the rows the product would write for `campaign` into a run of its own. Returns
    (seconds for the COPY and its commit, the run's id)."""
    from django.db import connection

    from sampling.bulk import column_defaults
    from sampling.dbtime import db_now
    from sampling.expansion import sample_rows
    from sampling.models import Batch, QuestionRevision, Run, Sample
    from sampling.planning import batch_sizes
    from sampling.services import campaign_as_spec

    spec = campaign_as_spec(campaign=campaign)
    run = Run.objects.create(
        tenant=campaign.tenant,
        campaign=campaign,
        config_snapshot={},
        planned_samples=spec.sample_count,
    )
    batches = Batch.objects.bulk_create(
        Batch(run=run, index=i, platform=platform, size=size)
        for i, (platform, size) in enumerate(batch_sizes(spec))
    )
    revision_ids = list(
        QuestionRevision.objects.filter(question__campaign=campaign)
        .order_by("question__position")
        .values_list("pk", flat=True)
    )
    fields, defaults = column_defaults(Sample)
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    with tempfile.TemporaryFile() as rows_file:
        for row in sample_rows(run, spec, revision_ids, batches, db_now()):
            values = [_copy_text(row.get(f.attname, defaults[f.attname])) for f in fields]
            rows_file.write(("\t".join(values) + "\n").encode())
        common.log(f"plan: raw COPY input {rows_file.tell() / common.MIB:,.0f} MiB")
        common.vacuum()
        with common.timed() as copy:
            _stream(rows_file, f"COPY sampling_sample ({columns}) FROM STDIN")
    return copy.seconds, run.pk


def _stream(rows_file: IO[bytes], copy_sql: str) -> None:
    from django.db import connection, transaction

    rows_file.seek(0)
    with transaction.atomic(), connection.cursor() as cursor, cursor.cursor.copy(copy_sql) as copy:
        while chunk := rows_file.read(1 << 20):
            copy.write(chunk)


def _copy_text(value: Any) -> str:
    """COPY's text format for the values a sample holds (no tabs, newlines or backslashes)."""
    if value is None:
        return "\\N"
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bool):
        return "t" if value else "f"
    return str(value)


if __name__ == "__main__":
    common.run_alone(
        measure, __doc__ or "", {"--samples": ("GEO_BENCH_PLAN_SAMPLES", DEFAULT_SAMPLES)}
    )
