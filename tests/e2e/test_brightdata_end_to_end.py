"""`manage.py launch_run` for a campaign on Copilot and Perplexity, both served by Bright Data on
the simulator, through a real worker and the dispatcher: the dispatcher batches each surface's
submits, Bright Data gets one trigger per batch (one snapshot), the run finishes with every
answer and its citations stored, each sample records its snapshot and input, and reconciliation
lists the tasks as cost unknown (Bright Data states no cost)."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from billing.reconciliation import reconcile
from connectors.adapters.brightdata import split_upstream_id
from evidence.models import Citation
from sampling.models import Run, Sample
from tests.conftest import ensure_tenant, fund_tenant, make_campaign_data
from tests.durability.conftest import assert_invariants
from tests.e2e.conftest import drive_until_finished

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

TARGETS = [
    {"platform": "copilot_web", "device": "desktop", "region": "us", "mode": "web_search"},
    {"platform": "perplexity_web", "device": "desktop", "region": "gb", "mode": "web_search"},
]
SURFACES = [t["platform"] for t in TARGETS]


def test_a_campaign_on_copilot_and_perplexity_runs_end_to_end_through_bright_data(
    simulator: Any, celery_worker: Any, tmp_path: Path
) -> None:
    fund_tenant(ensure_tenant("acme"))
    data = make_campaign_data(questions=3, targets=TARGETS, repeats=2)
    path = tmp_path / "campaign.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    out = io.StringIO()
    call_command("launch_run", str(path), stdout=out)
    run = Run.objects.get(pk=json.loads(out.getvalue())["run_id"])
    celery_worker()

    status = drive_until_finished(run.pk)

    assert status.finished and status.outcome.value == "all_succeeded", status.as_dict()
    samples = Sample.objects.filter(run=run)
    assert Counter(samples.values_list("platform", "collection_state")) == {
        (surface, "completed"): 6 for surface in SURFACES
    }
    # One vendor host for both surfaces, and a snapshot per batch, not per sample.
    calls = simulator.stats()["platforms"]["brightdata"]["paths"]
    snapshots = {split_upstream_id(s.upstream_id)[0] for s in samples}
    assert calls["POST /datasets/v3/trigger"] == len(snapshots) < len(samples)
    logged = {entry["upstream_id"] for entry in simulator.answers("copilot_web")}
    logged |= {entry["upstream_id"] for entry in simulator.answers("perplexity_web")}
    assert set(samples.values_list("upstream_id", flat=True)) <= logged
    assert Citation.objects.filter(sample__run=run).exists()
    # No stated cost: every task is listed as cost unknown, none guessed.
    rows = reconcile(run_id=run.pk).rows
    assert {r.platform for r in rows} == set(SURFACES)
    assert all(r.recorded_cost is None for r in rows)
    assert_invariants(run)
