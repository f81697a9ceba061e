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


def test_a_test_that_writes_changes_the_world_for_itself(two_tenants: World) -> None:
    as_built = _as_built(two_tenants)
    alpha, _ = two_tenants
    Tenant.objects.filter(pk=alpha.tenant.pk).update(name="renamed")
    Tenant.objects.create(slug="intruder", name="intruder")
    # A finished run cannot be cancelled (pipeline/runs.py); the column is written directly.
    Run.objects.filter(pk=alpha.run.pk).update(cancelled_at=Now())
    assert _as_built(two_tenants) != as_built


def test_the_next_test_sees_the_world_as_built(two_tenants: World) -> None:
    # Whichever test of the module ran before on this worker (xdist may run the writer
    # elsewhere), none of its writes is left: the world is as tests/world.py builds it.
    alpha, _ = two_tenants
    assert not Tenant.objects.filter(slug="intruder").exists()
    assert Tenant.objects.get(pk=alpha.tenant.pk).name != "renamed"
    assert Run.objects.get(pk=alpha.run.pk).cancelled_at is None
