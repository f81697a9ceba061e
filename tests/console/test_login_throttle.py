"""Console logins are throttled (django-axes, PostgreSQL-backed attempts) and passwords are
checked by Django's validators (issue 28, point 5: 40 wrong passwords answered 200 and the
right one then logged in; the password `a` was accepted)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.contrib.auth import get_user_model
from django.test import Client
from django.test.client import RequestFactory
from django.urls import reverse

from console.login_throttle import client_address
from tests.world import PASSWORD

pytestmark = pytest.mark.django_db

LOGIN = "/admin/login/"
LIMIT = 10  # settings.AXES_FAILURE_LIMIT's default (GEO_LOGIN_FAILURE_LIMIT)


@pytest.fixture
def olga() -> Any:
    return get_user_model().objects.create_user("olga", password=PASSWORD, is_staff=True)


def _log_in(client: Client, password: str, address: str = "203.0.113.7") -> Any:
    return client.post(
        LOGIN,
        {"username": "olga", "password": password, "next": "/admin/"},
        REMOTE_ADDR=address,
    )


def _logged_in(client: Client) -> bool:
    return client.get(reverse("admin:index")).status_code == 200


def test_the_right_password_is_refused_after_ten_failures_from_one_address(olga: Any) -> None:
    client = Client()
    for _ in range(LIMIT - 1):
        assert _log_in(client, "wrong").status_code == 200  # the form again, with its error
    assert _log_in(client, "wrong").status_code == 429  # the tenth locks the pair out
    locked = _log_in(client, PASSWORD)
    assert locked.status_code == 429
    assert "Too many failed logins for olga" in locked.content.decode()
    assert not _logged_in(client)
    assert AccessAttempt.objects.get(username="olga").failures_since_start >= LIMIT


def test_a_successful_login_resets_the_count(olga: Any) -> None:
    for _ in range(2):
        client = Client()
        for _ in range(LIMIT - 1):
            assert _log_in(client, "wrong").status_code == 200
        assert _log_in(client, PASSWORD).status_code == 302
        assert _logged_in(client)


def test_the_lockout_is_per_address_and_ends_after_the_cool_off(olga: Any) -> None:
    for _ in range(LIMIT):
        _log_in(Client(), "wrong")
    assert _log_in(Client(), PASSWORD).status_code == 429
    elsewhere = Client()
    assert _log_in(elsewhere, PASSWORD, address="198.51.100.9").status_code == 302
    # 16 minutes later (the attempts' time moved back; the cool-off is 15 minutes).
    attempt = AccessAttempt.objects.get(username="olga", ip_address="203.0.113.7")
    AccessAttempt.objects.filter(pk=attempt.pk).update(
        attempt_time=attempt.attempt_time - timedelta(minutes=16)
    )
    later = Client()
    assert _log_in(later, PASSWORD).status_code == 302 and _logged_in(later)


def test_logins_without_a_request_are_not_counted_so_the_suites_own_logins_work(
    olga: Any,
) -> None:
    client = Client()
    for _ in range(LIMIT + 2):
        assert not client.login(username="olga", password="wrong")
    assert client.login(username="olga", password=PASSWORD)
    assert not AccessAttempt.objects.exists()


def test_behind_trusted_proxies_the_address_the_outermost_proxy_saw_is_counted(
    settings: Any,
) -> None:
    request = RequestFactory().get(
        "/", REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="6.6.6.6, 203.0.113.7, 10.0.0.1"
    )
    settings.GEO_TRUSTED_PROXIES = 0
    assert client_address(request) == "10.0.0.2"
    settings.GEO_TRUSTED_PROXIES = 2  # a load balancer, then nginx: the client's is 2nd last
    assert client_address(request) == "203.0.113.7"
    settings.GEO_TRUSTED_PROXIES = 5  # fewer hops than proxies: the header is not trusted
    assert client_address(request) == "10.0.0.2"


def test_a_weak_password_is_refused_when_a_superuser_sets_one(olga: Any) -> None:
    root = get_user_model().objects.create_superuser("root", "root@example.com", PASSWORD)
    console = Client()
    console.force_login(root)
    url = reverse("admin:auth_user_password_change", args=[olga.pk])
    for weak, why in (("a", "too short"), ("123456789012", "entirely numeric")):
        page = console.post(url, {"password1": weak, "password2": weak})
        assert page.status_code == 200 and why in page.content.decode(), weak
    olga.refresh_from_db()
    assert olga.check_password(PASSWORD)
    strong = "another long passphrase"
    assert console.post(url, {"password1": strong, "password2": strong}).status_code == 302
