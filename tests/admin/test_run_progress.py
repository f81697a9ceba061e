"""The run page's one progress endpoint (issue 29, finding 3): every panel of the page from the
same moment, rendered by the page's own templates."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from console.admin.sampling.runs import RUN_PANELS
from sampling.models import Run, Sample
from tests import world
from tests.admin.conftest import SUCCEEDED
from tests.world import TenantWorld

pytestmark = pytest.mark.django_db

two_tenants = world.two_tenants


def _progress(client: Client, run: Run) -> dict:
    response = client.get(reverse("admin:sampling_run_progress", args=[run.pk]))
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    return response.json()


def test_progress_renders_every_panel_of_the_run_page(admin_client: Client, run: Run) -> None:
    data = _progress(admin_client, run)

    assert (
        set(data["panels"])
        == set(RUN_PANELS)
        == {
            "run-status",
            "run-money",
            "run-platforms",
            "run-failures",
            "run-layers",
            "run-batches",
        }
    )
    for panel_id, html in data["panels"].items():
        assert html.strip().startswith(f'<div class="geo-panel" id="{panel_id}"'), panel_id
    assert data["fields"] == {"finished_at": "–", "cancelled_at": "–"}


def test_every_panel_counts_the_samples_that_succeeded_since_launch(
    admin_client: Client, run: Run
) -> None:
    first = Sample.objects.filter(run=run).order_by("id").first()
    assert first is not None
    Sample.objects.filter(pk=first.pk).update(**SUCCEEDED)

    data = _progress(admin_client, run)

    panels = data["panels"]
    assert data["succeeded"] == 1 and data["pending"] == 3
    assert 'data-count="succeeded">1</strong>' in panels["run-status"]
    assert (
        '<td data-count="succeeded">1</td><td data-count="review">0</td>' in panels["run-platforms"]
    )
    assert '<td data-count="succeeded">1</td>' in panels["run-batches"]
    assert '<td data-count="pending">3</td>' in panels["run-batches"]
    assert 'data-layer-state="analysis.accepted">1</td>' in panels["run-layers"]


def test_progress_keeps_the_batch_page_the_person_is_looking_at(
    admin_client: Client, run: Run
) -> None:
    url = reverse("admin:sampling_run_progress", args=[run.pk])

    data = admin_client.get(url, {"batch_page": "1"}).json()

    assert '<tr class="batch" data-batch="0">' in data["panels"]["run-batches"]


def test_another_tenants_run_progress_is_a_404(
    two_tenants: tuple[TenantWorld, TenantWorld],
) -> None:
    # Through the one scope: the operator of alpha follows alpha's run, never bravo's.
    alpha, bravo = two_tenants
    client = Client()
    client.force_login(alpha.users["operator"])

    own = client.get(reverse("admin:sampling_run_progress", args=[alpha.run.pk]))
    other = client.get(reverse("admin:sampling_run_progress", args=[bravo.run.pk]))

    assert own.status_code == 200 and other.status_code == 404


def test_a_cancelled_runs_panels_show_its_cancelled_samples_apart_from_failed_ones(
    admin_client: Client, run: Run
) -> None:
    first = Sample.objects.filter(run=run).order_by("id").first()
    assert first is not None
    Sample.objects.filter(pk=first.pk).update(**SUCCEEDED)
    admin_client.post(
        reverse("admin:sampling_run_cancel", args=[run.pk]), {"confirm": "yes"}, follow=True
    )

    data = _progress(admin_client, run)

    # Four planned: one answered before the cancel, three never submitted.
    assert (data["succeeded"], data["failed"], data["cancelled"]) == (1, 3, 3)
    assert data["failed_not_cancelled"] == 0 and data["pending"] == 0
    assert data["outcome"] == "cancelled"  # not all_failed: nothing failed, a person cancelled
    panels = data["panels"]
    assert "Cancelled</span>" in panels["run-status"]
    assert 'data-count="failed">0</strong>' in panels["run-status"]
    assert 'data-count="cancelled">3</strong>' in panels["run-status"]
    for panel in ("run-platforms", "run-batches"):
        cells = '<td data-count="failed">0</td><td data-count="cancelled">3</td>'
        assert cells in panels[panel], panel
