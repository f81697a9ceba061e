"""Tenancy moved into its own app by state only: a database built by the old migrations keeps
its rows, its content types and its role groups' permissions when it migrates forward."""

from __future__ import annotations

from typing import Any

import pytest
from django.apps.registry import Apps
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from sampling.models import Run
from tenancy.models import Tenant, TenantMembership
from tenancy.roles import ROLE_PERMISSIONS

pytestmark = pytest.mark.django_db(transaction=True)


def _migrate(targets: list[tuple[str, str | None]]) -> Apps:
    """Migrate the test database to `targets`; the state's models at that point."""
    return MigrationExecutor(connection).migrate(targets).apps


def _latest() -> list[tuple[str, str | None]]:
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


def _old_rows(old: Apps) -> dict[str, Any]:
    """A tenant, a membership and a run, written through the old apps' models."""
    tenant = old.get_model("sampling", "Tenant").objects.create(slug="old", name="Old tenant")
    user = old.get_model("auth", "User").objects.create(username="old-operator")
    membership = old.get_model("evidence", "TenantMembership").objects.create(
        user=user, tenant=tenant, role="operator"
    )
    brand = old.get_model("sampling", "Brand").objects.create(tenant=tenant, name="Old brand")
    campaign = old.get_model("sampling", "Campaign").objects.create(
        tenant=tenant, name="Old campaign", brand=brand
    )
    run = old.get_model("sampling", "Run").objects.create(
        tenant=tenant, campaign=campaign, config_snapshot={}, planned_samples=0
    )
    return {"tenant": tenant.pk, "user": user.pk, "membership": membership.pk, "run": run.pk}


def test_a_database_at_the_old_migrations_keeps_its_tenancy_rows_when_migrated_forward() -> None:
    latest = _latest()
    # Unapplying tenancy/0001 unapplies everything that moved the models (their dependants).
    old = _migrate([("tenancy", None)])
    assert old.get_model("sampling", "Tenant")._meta.db_table == "sampling_tenant"
    tenant_type = ContentType.objects.get(app_label="sampling", model="tenant")
    view_pk = Permission.objects.get(content_type=tenant_type, codename="view_tenant").pk
    ids = _old_rows(old)

    _migrate(latest)

    tenant = Tenant.objects.get(pk=ids["tenant"])
    assert tenant.slug == "old"
    membership = TenantMembership.objects.get(pk=ids["membership"])
    assert (membership.user_id, membership.tenant_id, membership.role) == (
        ids["user"],
        tenant.pk,
        "operator",
    )
    assert Run.objects.get(pk=ids["run"]).tenant == tenant
    # The content type was relabelled, not recreated: its permission rows (and the groups
    # holding them) are the same rows.
    ContentType.objects.clear_cache()
    assert ContentType.objects.get_for_model(Tenant).pk == tenant_type.pk
    assert Permission.objects.get(content_type=tenant_type, codename="view_tenant").pk == view_pk
    assert not ContentType.objects.filter(app_label="sampling", model="tenant").exists()
    assert not ContentType.objects.filter(app_label="evidence", model="tenantmembership").exists()


def test_role_groups_get_every_permission_from_the_migrations_alone() -> None:
    latest = _latest()
    _migrate([("tenancy", None)])
    for group in Group.objects.all():
        group.permissions.clear()

    _migrate(latest)  # no post_migrate here: only the data migrations fill the groups

    for role, perms in ROLE_PERMISSIONS.items():
        group = Group.objects.get(name=role)
        have = {f"{p.content_type.app_label}.{p.codename}" for p in group.permissions.all()}
        assert have == perms, role
    assert "tenancy.view_tenant" in ROLE_PERMISSIONS["finance"]
