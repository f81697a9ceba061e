"""Runs in the admin: read-only, every status from the aggregation service."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from pipeline.launch import launch_run
from sampling.models import Run
from sampling.selectors import run_status
from tests.admin.conftest import SUCCEEDED

COUNTS = ("succeeded", "failed", "invalid", "review", "pending")


@pytest.mark.django_db
def test_run_list_shows_outcome_and_counts_from_run_status(
    admin_client: Client, run_with_outcomes: Run
) -> None:
    status = run_status(run_id=run_with_outcomes.pk)
    assert (status.succeeded, status.failed, status.invalid, status.review, status.pending) == (
        1,
        1,
        1,
        0,
        1,
    )

    page = admin_client.get(reverse("admin:sampling_run_changelist")).content.decode()

    for name in COUNTS:
        assert f'<td class="field-{name}_count">{getattr(status, name)}</td>' in page
    assert '<td class="field-planned">4</td>' in page
    assert ">In progress</span>" in page
    assert '<td class="field-campaign_name">Q4 visibility</td>' in page


@pytest.mark.django_db
def test_run_detail_shows_status_layers_batches_snapshot_and_samples_link(
    admin_client: Client, run_with_outcomes: Run
) -> None:
    status = run_status(run_id=run_with_outcomes.pk)

    page = admin_client.get(
        reverse("admin:sampling_run_change", args=[run_with_outcomes.pk])
    ).content.decode()

    assert 'data-outcome="in_progress">In progress</span>' in page
    assert "3 of 4 samples terminal (75%)" in page
    for name in COUNTS:
        assert f'data-count="{name}">{getattr(status, name)}</strong>' in page
    for layer, states in status.layers.items():
        for state, n in states.items():
            assert f'data-layer-state="{layer}.{state}">{n}</td>' in page
    assert 'data-layer-state="analysis.review">0</td>' in page  # zero states listed too
    assert '<tr class="batch" data-batch="0">' in page
    assert 'class="geo-seg-succeeded" style="width: 25.00%"' in page
    assert f"?run={run_with_outcomes.pk}" in page  # link to the run's samples
    assert "&quot;snapshot_version&quot;: 1" in page  # frozen config, pretty-printed, escaped
    assert "Which CRM is best for a small team?" in page


@pytest.mark.django_db
def test_finished_run_shows_its_final_outcome(admin_client: Client, run: Run) -> None:
    run.samples.update(**SUCCEEDED)

    page = admin_client.get(reverse("admin:sampling_run_change", args=[run.pk])).content.decode()

    assert 'data-outcome="all_succeeded">All succeeded</span>' in page
    assert "4 of 4 samples terminal (100%)" in page


@pytest.mark.django_db
def test_runs_cannot_be_added_changed_or_deleted(admin_client: Client, run: Run) -> None:
    change_url = reverse("admin:sampling_run_change", args=[run.pk])

    assert admin_client.get(reverse("admin:sampling_run_add")).status_code == 403
    assert admin_client.get(reverse("admin:sampling_run_delete", args=[run.pk])).status_code == 403
    page = admin_client.get(change_url).content.decode()
    assert 'name="_save"' not in page
    admin_client.post(change_url, {"planned_samples": 1, "priority": 9})
    run.refresh_from_db()
    assert (run.planned_samples, run.priority) == (4, 0)


@pytest.mark.django_db
def test_run_list_reads_every_status_in_the_same_queries_however_many_runs(
    admin_client: Client, run: Run
) -> None:
    url = reverse("admin:sampling_run_changelist")
    with CaptureQueriesContext(connection) as one_run:
        admin_client.get(url)
    launch_run(campaign=run.campaign)
    with CaptureQueriesContext(connection) as two_runs:
        admin_client.get(url)

    assert len(two_runs) == len(one_run)  # statuses of the page's runs: one counters query
