"""`manage.py demo` on the embedded default (SQLite, the filesystem broker) supervises its
children: its worker is SIGKILLed mid-run, the demo says it restarted it, and the run still
finishes with every planned sample accounted for."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings

from tests.conftest import BASE_CAMPAIGN

pytestmark = pytest.mark.e2e

TARGETS = [
    {"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"},
    {"platform": "anthropic", "device": "desktop", "region": "us", "mode": "web_search"},
    {"platform": "collector", "device": "desktop", "region": "us", "mode": "web_search"},
]
_STARTED = re.compile(r"started worker \(pid (\d+)\)")
_PROGRESS = re.compile(r"^\s+(\d+)/(\d+) done")
_CONSERVATION = re.compile(
    r"planned (\d+) = succeeded (\d+) \+ failed (\d+) \+ invalid (\d+) \+ review (\d+)"
    r" \+ pending (\d+)"
)


def _embedded_env(var: Path) -> dict[str, str]:
    """This environment without any service: the demo's own embedded default in `var`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", "REDIS_URL", "PROMETHEUS_MULTIPROC_DIR")
        and not k.startswith("S3_")
    }
    return {**env, "GEO_VAR_DIR": str(var), "GEO_LOG_LEVEL": "WARNING"}


def test_demo_restarts_a_killed_worker_and_still_accounts_for_every_sample(tmp_path: Path) -> None:
    campaign = tmp_path / "campaign.json"
    data = {
        **BASE_CAMPAIGN,
        "questions": [f"Which CRM should team {i} pick?" for i in range(4)],
        "targets": TARGETS,
        "repeats": 2,
        "screenshot_policy": "none",
    }
    campaign.write_text(json.dumps(data))
    demo = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "demo",
            "--campaign",
            str(campaign),
            "--stall-seconds",
            "120",
        ],
        cwd=settings.BASE_DIR,
        env=_embedded_env(tmp_path / "var"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert demo.stdout is not None
    output: list[str] = []
    worker_pid, killed = 0, False
    for line in demo.stdout:
        output.append(line)
        if started := _STARTED.search(line):
            worker_pid = int(started.group(1))
        progress = _PROGRESS.match(line)
        if progress and not killed and 0 < int(progress.group(1)) < int(progress.group(2)):
            os.kill(worker_pid, signal.SIGKILL)  # mid-run: some samples done, some not
            killed = True
    text = "".join(output)
    assert demo.wait(timeout=60) == 0, text
    assert killed, f"the run ended before the worker could be killed:\n{text}"
    assert re.search(r"worker exited with -9; restarted \(pid \d+\)", text), text
    planned, *parts, pending = map(int, _CONSERVATION.search(text).groups())  # type: ignore[union-attr]
    assert planned == len(TARGETS) * 4 * 2
    assert pending == 0 and sum(parts) == planned, text
    assert "Checks passed:" in text, text
