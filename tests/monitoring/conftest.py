"""Runs collected from the simulator, in process, with their series written (tests/reports)."""

from __future__ import annotations

from typing import Any

from monitoring.services import write_series
from pipeline.runs import finish_run_if_done
from sampling.models import Run
from tests.conftest import launch_funded, make_campaign_data
from tests.evidence import conftest as evidence_fixtures
from tests.inprocess import drive_in_process
from tests.reports.conftest import TARGETS, simulator  # noqa: F401  (the fixture)

local_storage = evidence_fixtures.local_storage


def series_run(
    *,
    questions: int = 2,
    repeats: int = 2,
    targets: list[dict[str, str]] | None = None,
    name: str = "series",
    edit: dict[int, str] | None = None,
    topics: dict[int, list[str]] | None = None,
) -> Run:
    """A run of campaign `name` driven to its end in this process, its series written.
    `edit`: question position -> another text; `topics`: question position -> topics."""
    data = make_campaign_data(
        questions=questions, targets=targets or TARGETS, repeats=repeats, name=name
    )
    for position, text in (edit or {}).items():
        data["questions"][position] = text
    if topics is not None:
        data["topics"] = {data["questions"][p]: names for p, names in topics.items()}
    data["screenshot_policy"] = "none"
    run: Any = launch_funded(data)
    drive_in_process(run.pk)
    finish_run_if_done(run_id=run.pk)  # what the last step's commit does
    write_series(run_id=run.pk)
    run.refresh_from_db()
    return run
