"""Benchmark: the reconciliation export at 50,000 rows (issue 28 point 8: under 30 s).

`measure() -> list[BenchRow]` (bench/table.py) for bench/run_all.py; `python bench/exports.py
[--rows N]` prints the table alone. Not a test.

Two figures, both against the absolute target:

* database to workbook: a provider statement of N lines imported (billing.reconciliation
  .import_statement), then `reconcile(platform=...)` and the XLSX written
  (billing.exports.reconciliation_xlsx_file), timed together; each task is one the ledger has
  not recorded (`missing_ours`), so charge and recorded cost are empty cells;
* workbook alone: N rows with every amount filled (charge, recorded, statement, difference),
  the widest row the export writes; and the same at N / 4, so the time per row shows the
  export is linear (the old normal-mode workbook re-read its sheet on every row: 2,000 /
  4,000 / 8,000 rows took 5 / 18 / 82 s).

The CSV of the same N rows is timed too (streamed in chunks, StreamingHttpResponse's body).
Sizes: GEO_BENCH_EXPORT_ROWS (default 50,000).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common
from bench.table import BenchRow

TARGET_S = 30.0
NOW = "2026-11-11T02:00:00Z"


def _statement(rows: int) -> bytes:
    lines = ["upstream_id,amount,currency,occurred_at"]
    lines += [f"bench-task-{n},0.{n % 100:02d},USD,{NOW}" for n in range(rows)]
    return ("\n".join(lines) + "\n").encode()


def _full_report(rows: int):  # type: ignore[no-untyped-def]
    from billing.reconciliation import AMOUNT_MISMATCH, ReconReport, ReconRow

    run_id = "6f1c2a4e-0000-4000-8000-000000000000"
    return ReconReport(
        rows=[
            ReconRow(
                platform="collector",
                upstream_id=f"bench-task-{n}",
                run_id=run_id,
                sample_id=n + 1,
                charge=90,
                charge_currency="USD",
                recorded_cost=40 + n % 7,
                recorded_currency="USD",
                statement_cost=45,
                statement_currency="USD",
                cost_currency="USD",
                status=AMOUNT_MISMATCH,
            )
            for n in range(rows)
        ],
        run_id=run_id,
        totals={AMOUNT_MISMATCH: rows},
    )


def _row(name: str, seconds: float, rows: int) -> BenchRow:
    common.log(f"{name}: {seconds:.2f} s ({rows / seconds:,.0f} rows/s)")
    return BenchRow(
        name=name,
        product=f"{seconds:.2f} s ({rows / seconds:,.0f} rows/s)",
        reference="",
        ratio="",
        target=f"< {TARGET_S:.0f} s",
        met=seconds < TARGET_S,
    )


def measure() -> list[BenchRow]:
    rows = common.env_int("GEO_BENCH_EXPORT_ROWS", 50_000)
    with common.bench_database():
        from billing import exports
        from billing.reconciliation import import_statement, reconcile

        import_statement(provider="collector", filename="bench.csv", content=_statement(rows))
        with common.timed() as from_db:
            report = reconcile(platform="collector")
            exports.reconciliation_xlsx_file(report).close()
        assert len(report.rows) == rows, len(report.rows)
        full = _full_report(rows)
        with common.timed() as workbook:
            exports.reconciliation_xlsx_file(full).close()
        quarter = _full_report(rows // 4)
        with common.timed() as small:
            exports.reconciliation_xlsx_file(quarter).close()
        with common.timed() as as_csv:
            size = sum(len(chunk) for chunk in exports.reconciliation_csv_chunks(full))
        common.log(f"CSV: {size:,} characters")
    per_row = (workbook.seconds / rows) / (small.seconds / (rows // 4))
    common.log(f"XLSX time per row at {rows:,} vs {rows // 4:,} rows: {per_row:.2f} x")
    return [
        _row(
            f"reconcile + XLSX, {rows:,} statement tasks from the database", from_db.seconds, rows
        ),
        _row(f"reconciliation XLSX, {rows:,} full rows", workbook.seconds, rows),
        BenchRow(
            name=f"XLSX time per row, {rows:,} vs {rows // 4:,} rows (linear: about 1 x)",
            product=f"{per_row:.2f} x",
            reference=f"{small.seconds:.2f} s at {rows // 4:,}",
            ratio="",
            target="< 2 x",
            met=per_row < 2,
        ),
        _row(f"reconciliation CSV, {rows:,} full rows", as_csv.seconds, rows),
    ]


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "geo_collect.settings")
    common.run_alone(measure, __doc__ or "", {"--rows": ("GEO_BENCH_EXPORT_ROWS", 50_000)})
