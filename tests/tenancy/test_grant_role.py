"""grant_role --password-env on an existing user (issue 29, finding 11): repeating it with the
same password keeps the user's sessions; a new password says that it logs them out."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tenancy.models import Tenant
from tenancy.services import grant_role

pytestmark = pytest.mark.django_db


def _logged_in(username: str, password: str) -> Client:
    client = Client()
    assert client.login(username=username, password=password)
    return client


def _still_logged_in(client: Client) -> bool:
    return client.get(reverse("admin:index")).status_code == 200


def test_granting_again_with_the_same_password_keeps_the_user_logged_in() -> None:
    acme = Tenant.objects.create(slug="acme", name="Acme")
    grant_role(username="olga", tenant=acme, role="operator", password="first-pw!")
    client = _logged_in("olga", "first-pw!")

    again = grant_role(username="olga", tenant=acme, role="operator", password="first-pw!")

    assert again == "user olga is already operator in acme"
    assert _still_logged_in(client)


def test_a_new_password_says_it_logs_the_user_out() -> None:
    acme = Tenant.objects.create(slug="acme", name="Acme")
    grant_role(username="olga", tenant=acme, role="operator", password="first-pw!")
    client = _logged_in("olga", "first-pw!")

    changed = grant_role(username="olga", tenant=acme, role="analyst", password="second-pw!")

    assert changed == (
        "user olga: analyst in acme (was operator); password changed: their open sessions "
        "are logged out"
    )
    assert not _still_logged_in(client)
    assert _logged_in("olga", "second-pw!")
