"""The README's worker command is what an operator copies: it must name every queue the
deployment publishes to, or work (e.g. the run-finished event that settles billing) waits
forever."""

from __future__ import annotations

import re
from pathlib import Path

from geo_collect.processes import ALL_QUEUES

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_readme_worker_command_lists_every_queue() -> None:
    match = re.search(r"celery -A geo_collect worker -Q ([\w.,]+)", README.read_text())
    assert match is not None, "README has no worker command"
    assert set(match.group(1).split(",")) == set(ALL_QUEUES)
