"""Billing test helpers: real tenants, campaigns and runs through sampling's own services."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from billing.services import ensure_default_price_version, post_pending_captures, queue_capture
from pipeline.launch import launch_run
from sampling.models import Run, Sample
from sampling.services import save_campaign
from tenancy.models import Tenant
from tests.conftest import make_campaign_data, spec_with_tenant

COLLECTOR = {"platform": "collector", "device": "desktop", "region": "us", "mode": "web_search"}
COLLECTOR_DEEP = {**COLLECTOR, "mode": "deep_thinking"}
OPENAI = {"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"}


@pytest.fixture(autouse=True)
def _deferred_checks_fire(request: pytest.FixtureRequest) -> Iterator[None]:
    """In tests wrapped in a rolled-back transaction the deferred zero-sum trigger would never
    fire. SET CONSTRAINTS ALL IMMEDIATE at the end fires every pending check retroactively, so
    every entry a test posted is verified by PostgreSQL itself."""
    yield
    marker = request.node.get_closest_marker("django_db")
    if marker is None or marker.kwargs.get("transaction"):
        return
    if (
        connection.vendor == "postgresql"
        and connection.in_atomic_block
        and not connection.needs_rollback
    ):
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")


def tenant(slug: str = "acme") -> Tenant:
    obj, _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": slug})
    return obj


def launch(
    *,
    tenant_slug: str = "acme",
    name: str = "plan",
    questions: int = 2,
    targets: list[dict[str, str]] | None = None,
    repeats: int = 1,
    screenshot_policy: str = "optional",
) -> Run:
    """A real launch: the run, its samples and the quote's hold in one transaction."""
    data: dict[str, Any] = make_campaign_data(
        questions=questions,
        targets=targets or [COLLECTOR],
        repeats=repeats,
        tenant=tenant_slug,
        name=name,
    )
    data["screenshot_policy"] = screenshot_policy
    campaign = save_campaign(spec=spec_with_tenant(data))
    return launch_run(campaign=campaign)  # holds the quote in the same transaction


def samples(run: Run) -> list[Sample]:
    return list(Sample.objects.filter(run=run).order_by("pk"))


def complete(sample: Sample, *, valid: bool = True, screenshot: bool = True) -> None:
    Sample.objects.filter(pk=sample.pk).update(
        submission_state="accepted",
        collection_state="completed",
        evidence_state="stored" if screenshot else "partial",
        evidence_reason="" if screenshot else "SCREENSHOT_UNAVAILABLE",
        validity="valid" if valid else "invalid",
        upstream_id=f"task-{sample.pk}",
        queue_state="done",
    )


def charge(sample: Sample) -> int:
    """Charge a valid sample the way the pipeline does: its verdict queues the charge
    (`queue_capture`, in the verdict's fenced write) and the dispatcher's bookkeeping posts the
    queued charges (`post_pending_captures`, as `Dispatcher.tick` calls it). Returns the samples
    charged by that posting."""
    queue_capture(run_id=sample.run_id, sample_id=sample.pk)
    return post_pending_captures()


def fail(sample: Sample, *, accepted: bool = False) -> None:
    Sample.objects.filter(pk=sample.pk).update(
        submission_state="accepted" if accepted else "planned",
        collection_state="failed",
        queue_state="done",
    )


@pytest.fixture
def prices() -> None:
    ensure_default_price_version()


def run_queued_imports() -> list[str]:
    """What the worker does with each statement import's outbox message (the task called
    directly with the message's id, as the relay would); the statuses."""
    from billing.imports import TASK
    from billing.tasks import import_statement
    from sampling.models import OutboxMessage

    messages = OutboxMessage.objects.filter(task=TASK, completed_at=None).order_by("pk")
    return [import_statement(**m.payload, outbox_id=m.pk) for m in messages]
