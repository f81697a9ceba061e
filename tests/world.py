"""The two-tenant world: two tenants with everything a person can open (campaigns, runs
collected through the simulator with captures, evidence objects, citations and mentions;
billing with top-ups, holds, captures and settlements; a review decision and a statement),
one user per role in each.

Built once per test module and shared, the way Django's `TestCase.setUpTestData` shares class
data: the world is written inside a transaction the module's fixture opens, and pytest-django
runs every test of a `django_db` (non-transactional) module in a savepoint of it, rolled back
after the test. So a test that writes (a cancel, a resume, a launch) leaves the next test the
world as built, and the module's end rolls the whole world back. A transactional test
(`transaction=True`) flushes the tables, so it cannot share a world: it gets one built for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.test import override_settings

from alerts.models import (
    Alert,
    AlertDelivery,
    AlertRule,
    AlertState,
    AlertSubscription,
    Channel,
    RuleKind,
)
from billing.reconciliation import import_statement
from evidence.models import Capture, DomainCategory, ReviewDecision
from pipeline.runs import finish_run_if_done
from sampling.models import Run, Sample
from simulator import start_simulator
from tenancy.models import Tenant
from tenancy.services import grant_role
from tests.evidence.helpers import COLLECTOR, OPENAI, collected_run

PASSWORD = "correct horse battery"
SIMULATOR_SEED = 3  # the evidence tests' simulator

World = tuple["TenantWorld", "TenantWorld"]


@dataclass
class TenantWorld:
    tenant: Tenant
    marker: str  # appears in every name of this tenant's rows
    run: Run
    users: dict[str, AbstractBaseUser] = field(default_factory=dict)


def build_tenant(slug: str, marker: str) -> TenantWorld:
    run = collected_run(
        [*COLLECTOR, *OPENAI],
        questions=2,
        tenant=slug,
        name=f"{marker} campaign",
        brand={"name": f"{marker} brand", "aliases": [], "domains": [f"{slug}.example"]},
        # No screenshots: each costs a Chromium start (about 0.7 s) and no test of this world
        # reads one; screenshots are covered by tests/evidence and the browser flows.
        screenshot_policy="none",
    )
    # The run's end, which its last step checks after its commit: in the shared world's
    # transaction nothing commits.
    finish_run_if_done(run_id=run.pk)
    tenant = Tenant.objects.get(slug=slug)
    Tenant.objects.filter(pk=tenant.pk).update(name=f"{marker} Corp")
    sample = Sample.objects.filter(run=run).order_by("id").first()
    assert sample is not None
    ReviewDecision.objects.create(
        sample=sample,
        decision="acknowledged",
        note=f"{marker} note",
        analysis_state_before=sample.analysis_state,
        analysis_state_after=sample.analysis_state,
    )
    world = TenantWorld(tenant=tenant, marker=marker, run=run)
    for role in ("operator", "analyst", "finance"):
        username = f"{slug}-{role}"
        grant_role(username=username, tenant=tenant, role=role, password=PASSWORD)
        world.users[role] = get_user_model().objects.get(username=username)
    _monitoring_rows(world)
    return world


def _monitoring_rows(world: TenantWorld) -> None:
    """What the alerts and the tenant's domain categories add: a rule, an alert it fired, a
    subscriber and the delivery to them, and a category override, so the isolation walk opens
    each of their pages as every role of both tenants."""
    run, tenant, marker = world.run, world.tenant, world.marker
    rule = AlertRule.objects.create(
        tenant=tenant, campaign_id=run.campaign_id, kind=RuleKind.PLATFORM_GAP
    )
    alert = Alert.objects.create(
        tenant=tenant,
        campaign_id=run.campaign_id,
        rule=rule,
        condition_key=f"platform_gap|{marker}",
        run=run,
        summary=f"{marker} brand: a platform gap on openai",
        state=AlertState.ACKNOWLEDGED,  # not open: the alert tests' own open alerts stay alone
    )
    subscription = AlertSubscription.objects.create(
        user=world.users["operator"], tenant=tenant, time_zone="Europe/Berlin"
    )
    AlertDelivery.objects.create(
        tenant=tenant,
        channel=Channel.EMAIL,
        alert=alert,
        subscription=subscription,
        dedupe_key=f"world:{tenant.slug}:email",
    )
    DomainCategory.objects.create(
        tenant=tenant, domain=f"{tenant.slug}-reviews.example", category="reviews",
        note=f"{marker} override",
    )  # fmt: skip


def import_statement_for(*runs: Run) -> None:
    """One provider statement that lists tasks of both tenants (as real statements do)."""
    lines = ["upstream_id,amount,currency,occurred_at"]
    for capture in Capture.objects.filter(sample__run__in=runs).exclude(upstream_id=""):
        lines.append(f"{capture.upstream_id},25,USD,2026-11-11T02:00:00Z")
    import_statement(provider="collector", filename="stmt.csv", content="\n".join(lines).encode())


def build_world() -> World:
    """Tenant A ("alpha") and tenant B ("zzbravo"); the upstream simulator and the evidence
    storage must be configured (the caller's settings)."""
    alpha = build_tenant("alpha", "Alphaone")
    bravo = build_tenant("zzbravo", "Zzbravo")
    import_statement_for(alpha.run, bravo.run)
    return alpha, bravo


def _local_storage(settings: Any, media: Path) -> dict[str, Any]:
    return {
        **settings.STORAGES,
        "default": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(media)},
        },
    }


def _transactional(item: pytest.Item) -> bool:
    marker = item.get_closest_marker("django_db")
    return marker is not None and bool(marker.kwargs.get("transaction"))


@pytest.fixture(scope="module")
def two_tenants(
    request: pytest.FixtureRequest,
    django_db_setup: None,
    django_db_blocker: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[World]:
    """This module's world, in a transaction rolled back after its last test. Its evidence
    stays readable from local storage for the whole module; the simulator runs only while the
    world is built. A module scope fixture is set up before the test's own `django_db`
    savepoint, so the test's rollback never reaches the world."""
    transactional = [
        item.name
        for item in request.session.items
        if item.path == request.path and _transactional(item)
    ]
    if transactional:
        pytest.fail(
            f"{request.path.name} shares the two-tenant world, so its tests run in its "
            f"transaction; these are transactional (they need their own world: "
            f"two_tenants = world.two_tenants_per_test): {transactional}"
        )
    from django.conf import settings

    storage = override_settings(STORAGES=_local_storage(settings, tmp_path_factory.mktemp("world")))
    storage.enable()
    atomic = transaction.atomic()
    try:
        with django_db_blocker.unblock():
            atomic.__enter__()
        try:
            with django_db_blocker.unblock():
                world = _built_against_a_simulator()
            yield world
        finally:
            with django_db_blocker.unblock():
                transaction.set_rollback(True)
                atomic.__exit__(None, None, None)
    finally:
        storage.disable()


def _built_against_a_simulator() -> World:
    handle = start_simulator(seed=SIMULATOR_SEED)
    try:
        with override_settings(GEO_UPSTREAM_BASE_URL=handle.base_url):
            return build_world()
    finally:
        handle.stop()


@pytest.fixture
def two_tenants_per_test(simulator: Any, local_storage: Any) -> World:
    """A world built for one test, for a module of transactional tests (their flush would
    empty a shared one): assign it to `two_tenants` in that module."""
    return build_world()
