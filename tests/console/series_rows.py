"""Runs and their metrics-series rows written directly (not through the pipeline), for the
dashboard's tests: the rows are what the dashboard reads, so a test states their counts."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from monitoring.models import SeriesRow
from sampling.models import Campaign, Run


def daily_runs(campaign: Campaign, first: datetime, days: int) -> list[Run]:
    runs = [
        Run(
            tenant_id=campaign.tenant_id,
            campaign=campaign,
            config_snapshot={},
            planned_samples=0,
            finished_at=first + timedelta(days=day),
        )
        for day in range(days)
    ]
    return Run.objects.bulk_create(runs)


def write_rows(
    campaign: Campaign,
    runs: Sequence[Run],
    *,
    platforms: Sequence[str],
    entities: Sequence[str],
    keys: Sequence[str],
    valid: int = 20,
    mentioned: dict[str, int] | None = None,
    topic: str = "",
    **counts: int,
) -> None:
    """One all-questions row (or one `topic` row) per run x platform x entity; `keys[i]` is
    run i's comparability key; `mentioned`: entity -> mentions per row (default 10)."""
    brand = campaign.brand.name
    rows = []
    for run, key in zip(runs, keys, strict=True):
        assert run.finished_at is not None
        for platform in platforms:
            for entity in entities:
                values: dict[str, Any] = {
                    "planned": valid,
                    "valid": valid,
                    "mentioned": (mentioned or {}).get(entity, 10),
                    "ranked": 5,
                    "position_sum": 10,
                    "rated": 10,
                    "positive": 6,
                    "negative": 2,
                    "citations": 8,
                    "own_citations": 2,
                    **counts,
                }
                rows.append(
                    SeriesRow(
                        tenant_id=campaign.tenant_id,
                        campaign=campaign,
                        run=run,
                        at=run.finished_at,
                        day=run.finished_at.date(),
                        platform=platform,
                        region="us",
                        device="desktop",
                        mode="web_search",
                        topic=topic,
                        entity=entity,
                        is_brand=entity == brand,
                        analysis_revision=1,
                        comparability_key=key,
                        **values,
                    )
                )
    SeriesRow.objects.bulk_create(rows)
