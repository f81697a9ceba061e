"""API tokens expire, can be listed and revoked (API and console), and show their last use,
written at most once a minute (issue 28, point 5)."""

from __future__ import annotations

import io
import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.models.functions import Now
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from api.auth import issue_token, new_token
from api.models import ApiToken

pytestmark = pytest.mark.django_db

TOKENS = "/api/v1/tokens/"


def _person(name: str = "ivy", **extra: Any) -> Any:
    return get_user_model().objects.create_user(name, f"{name}@example.com", **extra)


def _client(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def _token_writes(queries: CaptureQueriesContext) -> list[str]:
    table = ApiToken._meta.db_table
    return [q["sql"] for q in queries.captured_queries if q["sql"].startswith(f'UPDATE "{table}"')]


def test_a_new_token_expires_after_the_default_lifetime(settings: Any) -> None:
    settings.GEO_API_TOKEN_DAYS = 30
    token, _ = issue_token(user=_person())
    lifetime = token.expires_at - token.created_at
    assert timedelta(days=30) - timedelta(seconds=5) < lifetime <= timedelta(days=30)


def test_an_expired_token_answers_401_saying_it_expired() -> None:
    token, raw = issue_token(user=_person())
    client = _client(raw)
    assert client.get(TOKENS).status_code == 200
    ApiToken.objects.filter(pk=token.pk).update(expires_at=Now() - timedelta(seconds=1))
    response = client.get(TOKENS)
    assert response.status_code == 401
    detail = response.json()["detail"]
    assert detail.startswith(f"token {token.prefix}… expired at ") and "make a new one" in detail
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'


def test_a_token_revoked_through_the_api_answers_401_saying_it_was_revoked() -> None:
    person = _person()
    _, keep_raw = issue_token(user=person, name="keep")
    drop, drop_raw = issue_token(user=person, name="drop")
    response = _client(keep_raw).post(f"{TOKENS}{drop.pk}/revoke")
    assert response.status_code == 200
    assert response.json()["state"] == "revoked" and response.json()["revoked_at"]
    refused = _client(drop_raw).get(TOKENS)
    assert refused.status_code == 401 and " was revoked at " in refused.json()["detail"]
    drop.refresh_from_db()
    assert drop.revoked_by == person
    assert _client(keep_raw).get(TOKENS).status_code == 200  # the other token still works


def test_revoking_again_keeps_the_first_revocation() -> None:
    token, raw = issue_token(user=_person())
    other, _ = issue_token(user=token.user)
    client = _client(raw)
    first = client.post(f"{TOKENS}{other.pk}/revoke").json()["revoked_at"]
    ApiToken.objects.filter(pk=other.pk).update(revoked_at=Now() - timedelta(hours=1))
    earlier = ApiToken.objects.get(pk=other.pk).revoked_at
    again = client.post(f"{TOKENS}{other.pk}/revoke")
    assert again.status_code == 200 and first
    assert ApiToken.objects.get(pk=other.pk).revoked_at == earlier


def test_a_token_can_revoke_itself_and_is_refused_from_then_on() -> None:
    token, raw = issue_token(user=_person())
    client = _client(raw)
    assert client.post(f"{TOKENS}{token.pk}/revoke").status_code == 200
    assert client.get(TOKENS).status_code == 401


def test_the_list_shows_only_the_callers_tokens_with_state_expiry_and_last_use() -> None:
    person, stranger = _person("ivy"), _person("sam")
    mine, raw = issue_token(user=person, name="ci")
    expired, _ = issue_token(user=person, name="old")
    ApiToken.objects.filter(pk=expired.pk).update(expires_at=Now() - timedelta(days=1))
    theirs, _ = issue_token(user=stranger)
    rows = _client(raw).get(TOKENS).json()["results"]
    by_id = {row["id"]: row for row in rows}
    assert set(by_id) == {mine.pk, expired.pk}
    assert by_id[mine.pk]["state"] == "active" and by_id[mine.pk]["current"] is True
    assert by_id[mine.pk]["name"] == "ci" and by_id[mine.pk]["prefix"] == raw[:8]
    assert by_id[mine.pk]["last_used_at"] is not None  # this very request
    assert by_id[expired.pk]["state"] == "expired" and by_id[expired.pk]["current"] is False
    assert by_id[expired.pk]["expires_at"] and by_id[expired.pk]["last_used_at"] is None
    assert "digest" not in by_id[mine.pk]
    # Another person's token is not one of yours: 404, and it stays usable.
    assert _client(raw).post(f"{TOKENS}{theirs.pk}/revoke").status_code == 404
    assert ApiToken.objects.get(pk=theirs.pk).revoked_at is None


def test_last_use_is_written_at_most_once_a_minute() -> None:
    token, raw = issue_token(user=_person())
    client = _client(raw)
    with CaptureQueriesContext(connection) as first:
        assert client.get(TOKENS).status_code == 200
    assert len(_token_writes(first)) == 1
    used = ApiToken.objects.get(pk=token.pk).last_used_at
    with CaptureQueriesContext(connection) as again:
        for _ in range(3):
            assert client.get(TOKENS).status_code == 200
    assert _token_writes(again) == []
    assert ApiToken.objects.get(pk=token.pk).last_used_at == used
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=Now() - timedelta(seconds=61))
    with CaptureQueriesContext(connection) as later:
        assert client.get(TOKENS).status_code == 200
    assert len(_token_writes(later)) == 1
    assert ApiToken.objects.get(pk=token.pk).last_used_at > used - timedelta(seconds=61)


def test_a_deactivated_users_token_answers_401_saying_so() -> None:
    person = _person()
    raw = new_token(user=person)
    get_user_model().objects.filter(pk=person.pk).update(is_active=False)
    response = _client(raw).get(TOKENS)
    assert response.status_code == 401 and "deactivated user" in response.json()["detail"]


def test_an_unknown_token_answers_401() -> None:
    response = _client("geo_not-a-token").get(TOKENS)
    assert response.status_code == 401 and response.json()["detail"] == "invalid token"


def test_the_api_token_command_takes_a_name_and_a_lifetime_within_the_limit(
    settings: Any,
) -> None:
    settings.GEO_API_TOKEN_MAX_DAYS = 60
    person = _person()
    out, err = io.StringIO(), io.StringIO()
    call_command("api_token", "ivy", "--name", "export", "--days", "7", stdout=out, stderr=err)
    token = ApiToken.objects.get(user=person)
    assert out.getvalue().strip().startswith(token.prefix) and token.name == "export"
    assert timedelta(days=6) < token.expires_at - timezone.now() <= timedelta(days=7)
    assert "expires at" in err.getvalue()
    for days in ("0", "61"):
        with pytest.raises(CommandError, match="a token lives 1 to 60 days"):
            call_command("api_token", "ivy", "--days", days, stdout=io.StringIO())


def test_a_superuser_makes_lists_and_revokes_tokens_in_the_console() -> None:
    admin = _person("root", is_staff=True, is_superuser=True)
    person = _person()
    console = Client()
    console.force_login(admin)
    made = console.post(
        "/admin/api/apitoken/add/", {"user": person.pk, "name": "from the console", "days": "5"},
        follow=True,
    )  # fmt: skip
    assert made.status_code == 200
    shown = re.search(r"(geo_[A-Za-z0-9_-]{40,})", made.content.decode())
    assert shown is not None, "the new token is shown once, after Save"
    raw = shown.group(1)
    token = ApiToken.objects.get(user=person)
    assert token.name == "from the console" and raw.startswith(token.prefix)
    assert timedelta(days=4) < token.expires_at - timezone.now() <= timedelta(days=5)
    assert _client(raw).get(TOKENS).status_code == 200

    listing = console.get("/admin/api/apitoken/").content.decode()
    assert token.prefix in listing and "active" in listing
    revoked = console.post(
        "/admin/api/apitoken/",
        {"action": "revoke", "_selected_action": [token.pk]},
        follow=True,
    )
    assert "1 token(s) revoked" in revoked.content.decode()
    token.refresh_from_db()
    assert token.revoked_at is not None and token.revoked_by == admin
    assert _client(raw).get(TOKENS).status_code == 401
    assert raw not in console.get(f"/admin/api/apitoken/{token.pk}/change/").content.decode()


def test_a_staff_user_without_superuser_cannot_open_the_token_pages() -> None:
    staff = _person("op", is_staff=True)
    console = Client()
    console.force_login(staff)
    assert console.get("/admin/api/apitoken/").status_code == 403
    assert console.get("/admin/api/apitoken/add/").status_code == 403
