"""Roles per tenant: groups kept in sync, choices limited to where the role may edit."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse

from sampling.models import Brand
from tenancy.models import Tenant
from tenancy.roles import ROLE_PERMISSIONS, sync_role_groups
from tenancy.services import grant_role

pytestmark = pytest.mark.django_db


def test_the_role_groups_hold_exactly_their_permissions_after_migrate() -> None:
    for role, perms in ROLE_PERMISSIONS.items():
        group = Group.objects.get(name=role)
        have = {f"{p.content_type.app_label}.{p.codename}" for p in group.permissions.all()}
        assert have == perms, role
    Group.objects.get(name="finance").permissions.clear()
    sync_role_groups()
    assert Group.objects.get(name="finance").permissions.count() == len(ROLE_PERMISSIONS["finance"])


def test_an_analyst_of_one_tenant_who_operates_another_creates_campaigns_only_there() -> None:
    alpha = Tenant.objects.create(slug="alpha", name="Alpha")
    bravo = Tenant.objects.create(slug="bravo", name="Bravo")
    Brand.objects.create(tenant=alpha, name="Alpha brand")
    Brand.objects.create(tenant=bravo, name="Bravo brand")
    grant_role(username="mixed", tenant=alpha, role="operator")
    grant_role(username="mixed", tenant=bravo, role="analyst")
    client = Client()
    client.force_login(get_user_model().objects.get(username="mixed"))

    form = client.get(reverse("admin:sampling_campaign_add")).context["adminform"].form

    assert [t.slug for t in form.fields["tenant"].queryset] == ["alpha"]
    assert [b.name for b in form.fields["brand"].queryset] == ["Alpha brand"]
    runs = client.get(reverse("admin:sampling_run_changelist"))
    assert runs.status_code == 200  # both roles read runs, each in its own tenant
