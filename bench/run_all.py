"""`make bench`: every benchmark, side by side with its reference, printed as one table.

Creates one throw-away bench database (bench/common.py), runs each module's `measure()` in
it, in the order below, and prints `bench.table.render(rows)` on stdout (progress and detail
lines go to stderr). A module whose file is absent is skipped with a line saying so; a module
that fails gets a row saying how, and the exit status is 1. docs/capacity.md explains the
figures. Not a test.

    python bench/run_all.py [--only plan] [--only claim] [--strict]

--strict also exits 1 when a row misses its target. Sizes: the GEO_BENCH_* variables each
module documents (e.g. GEO_BENCH_PLAN_SAMPLES=500000).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common
from bench.table import BenchRow, render

# plan and claim: bench/plan.py, bench/claim.py; status_report: run_status at 10k vs 1M and
# the report at 1M with its peak memory; collection: launch to finished vs a minimal asyncio
# client at C=64 and 128, the CPU per sample of worker, dispatcher and PostgreSQL, statements
# per step (GEO_BENCH_COLLECTION_SAMPLES, default 1,000); changes: change detection's false
# alarms and power over simulated campaigns, no database (GEO_BENCH_CHANGES_CAMPAIGNS, 2,000);
# exports: the reconciliation XLSX / CSV at 50,000 rows (GEO_BENCH_EXPORT_ROWS);
# statement_import: a 400,000-row statement uploaded, imported by a worker process, GETs
# timed meanwhile (GEO_BENCH_STATEMENT_ROWS); monitoring: a year of daily runs' series rows,
# the dashboard page and the series read timed (GEO_BENCH_MONITORING_RUNS, 365).
MODULES = (
    "plan",
    "claim",
    "status_report",
    "collection",
    "changes",
    "exports",
    "statement_import",
    "monitoring",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--only", action="append", choices=MODULES, help="repeatable")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    options = parser.parse_args()
    selected = [name for name in MODULES if not options.only or name in options.only]
    rows: list[BenchRow] = []
    notes: list[str] = []
    failed = False
    with common.bench_database() as database:
        common.log(f"bench database {database}")
        for name in selected:
            if not Path(__file__).with_name(f"{name}.py").exists():
                notes.append(f"skipped {name}: bench/{name}.py is absent")
                continue
            common.log(f"--- {name}")
            try:
                rows += importlib.import_module(f"bench.{name}").measure()
            except Exception as error:
                traceback.print_exc()
                failed = True
                rows.append(BenchRow(name, f"error: {error!r}"[:120], "", "", "", False))
    print(render(rows))
    for note in notes:
        print(note)
    if options.strict and not all(row.met for row in rows):
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
