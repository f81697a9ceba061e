"""`manage.py export_facts`: Parquet partitioned by tenant and day in the evidence store,
read back with DuckDB, whose totals are the report's."""

from __future__ import annotations

from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest
from django.core.management import call_command

from analysis.reports import build_run_report
from simulator import SimulatorHandle
from tests.monitoring.conftest import series_run

pytestmark = pytest.mark.django_db


def _read(root: Path, table: str) -> str:
    return f"read_parquet('{root}/facts/{table}/*/*/*.parquet', hive_partitioning = true)"


def test_the_export_read_back_with_duckdb_gives_the_reports_totals(
    simulator: SimulatorHandle,
    local_storage: Path,
    capsys: Any,
) -> None:
    simulator.script(
        {"match": "number 1:", "fault": "auth_error", "platform": "perplexity", "times": None}
    )
    run = series_run(questions=3, repeats=2)
    report = build_run_report(run_id=run.pk, with_trend=False)
    assert run.finished_at is not None
    day = run.finished_at.astimezone(UTC).date()

    call_command("export_facts", "--since", (day - timedelta(days=1)).isoformat())
    assert "4 file(s) written" in capsys.readouterr().out
    files = sorted(
        p.relative_to(local_storage).as_posix() for p in local_storage.rglob("*.parquet")
    )
    assert files == [
        f"facts/{table}/tenant=acme/day={day.isoformat()}/{run.pk}-r1.parquet"
        for table in ("citations", "mentions", "samples", "series")
    ]

    db = duckdb.connect()
    ((planned, succeeded, failed, partitions),) = db.execute(
        f"SELECT count(*), count(*) FILTER (bucket = 'succeeded'), "
        f"count(*) FILTER (bucket IN ('failed', 'cancelled')), count(DISTINCT tenant || day) "
        f"FROM {_read(local_storage, 'samples')}"
    ).fetchall()
    overall = report.overall
    assert (planned, succeeded, failed) == (
        overall.counts.planned,
        overall.counts.succeeded,
        overall.counts.failed + overall.counts.cancelled,
    )
    assert partitions == 1
    mentioned = dict(
        db.execute(
            f"SELECT entity, count(*) FILTER (counted AND mentioned) "
            f"FROM {_read(local_storage, 'mentions')} GROUP BY entity"
        ).fetchall()
    )
    assert mentioned == {e: r.successes for e, r in overall.entity_mention_rates.items()}
    ((citations, own),) = db.execute(
        f"SELECT count(*) FILTER (counted AND role = 'cited'), "
        f"count(*) FILTER (counted AND own AND role = 'cited') "
        f"FROM {_read(local_storage, 'citations')}"
    ).fetchall()
    assert (citations, own) == (overall.citation_share.n, overall.citation_share.successes)
    # The series: the rows of all questions, summed over the targets, per entity.
    series = {
        entity: (planned_, mentioned_)
        for entity, planned_, mentioned_ in db.execute(
            f"SELECT entity, sum(planned), sum(mentioned) FROM {_read(local_storage, 'series')} "
            "WHERE topic = '' AND question_id IS NULL GROUP BY entity"
        ).fetchall()
    }
    assert series == {
        e: (overall.counts.planned, r.successes) for e, r in overall.entity_mention_rates.items()
    }

    # Exporting again keeps what is there: nothing is written twice.
    call_command("export_facts", "--since", day.isoformat())
    assert "0 file(s) written, 4 already there" in capsys.readouterr().out
    assert len(list(local_storage.rglob("*.parquet"))) == 4
