"""The two-tenant world a module shares (tests/world.py): what one test writes is rolled back
before the next test of the module, which sees the world as built."""

from __future__ import annotations

import pytest
from django.db.models.functions import Now

from billing.models import JournalEntry
from sampling.models import Run
from tenancy.models import Tenant
from tests.world import World

pytestmark = pytest.mark.django_db


def _as_built(world: World) -> list[object]:
    alpha, _ = world
    return [
        sorted(Tenant.objects.values_list("slug", "name")),
        sorted(Run.objects.values_list("pk", "cancelled_at", "finished_at")),
        JournalEntry.objects.count(),
        sorted(alpha.tenant.members.values_list("user__username", "role")),
    ]


@pytest.fixture(scope="module")
def first_seen() -> list[list[object]]:
    return []


def test_a_test_that_writes_changes_the_world_for_itself(
    two_tenants: World, first_seen: list[list[object]]
) -> None:
    first_seen.append(_as_built(two_tenants))
    alpha, _ = two_tenants
    Tenant.objects.filter(pk=alpha.tenant.pk).update(name="renamed")
    Tenant.objects.create(slug="intruder", name="intruder")
    # A finished run cannot be cancelled (pipeline/runs.py); the column is written directly.
    Run.objects.filter(pk=alpha.run.pk).update(cancelled_at=Now())
    assert _as_built(two_tenants) != first_seen[0]


def test_the_next_test_sees_the_world_as_built(
    two_tenants: World, first_seen: list[list[object]]
) -> None:
    assert first_seen, "runs after the test that writes (file order)"
    assert _as_built(two_tenants) == first_seen[0]
