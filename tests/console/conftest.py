"""Two tenants with everything a person can open: campaigns, runs collected through the
simulator (captures, evidence objects, citations, mentions), billing (top-ups, holds,
captures, settlements), a review decision and a statement; one user per role of each."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser

from billing.reconciliation import import_statement
from evidence.models import Capture, ReviewDecision
from sampling.models import Run, Sample
from tenancy.models import Tenant
from tenancy.services import grant_role
from tests.evidence import conftest as evidence_fixtures
from tests.evidence.helpers import COLLECTOR, OPENAI, collected_run

PASSWORD = "correct horse battery"
# The simulator and local file storage, shared with the evidence tests.
simulator = evidence_fixtures.simulator
local_storage = evidence_fixtures.local_storage


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
    return world


def import_statement_for(*runs: Run) -> None:
    """One provider statement that lists tasks of both tenants (as real statements do)."""
    lines = ["upstream_id,amount,currency,occurred_at"]
    for capture in Capture.objects.filter(sample__run__in=runs).exclude(upstream_id=""):
        lines.append(f"{capture.upstream_id},25,USD,2026-11-11T02:00:00Z")
    import_statement(provider="collector", filename="stmt.csv", content="\n".join(lines).encode())


@pytest.fixture
def two_tenants(simulator: Any, local_storage: Any) -> tuple[TenantWorld, TenantWorld]:
    alpha = build_tenant("alpha", "Alphaone")
    bravo = build_tenant("zzbravo", "Zzbravo")
    import_statement_for(alpha.run, bravo.run)
    return alpha, bravo
