"""create_tenant, grant_role, top_up and launch_run as a new operator runs them: real
processes against the test database, one line and exit code 1 on every failure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model

from billing.models import JournalEntry
from billing.services import active_price_version, ensure_default_price_version
from sampling.models import Run
from tenancy.models import Tenant, TenantMembership
from tests.services import database_url

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(settings.BASE_DIR)
CAMPAIGN = ROOT / "demo" / "campaign.json"
ANN_PASSWORD = "a strong one for ann"  # passes settings.AUTH_PASSWORD_VALIDATORS


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": database_url(), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_a_new_operator_creates_a_tenant_funds_it_and_launches() -> None:
    ensure_default_price_version()  # what `migrate` leaves (a transactional test flushes it)
    assert "unknown tenant 'acme'" in one_line_error(manage("launch_run", str(CAMPAIGN)))

    assert manage("create_tenant", "acme", "--name", "Acme Inc").returncode == 0
    again = manage("create_tenant", "acme", "--name", "Acme Inc")
    assert again.returncode == 0 and "already exists" in again.stdout
    assert Tenant.objects.filter(slug="acme").count() == 1

    dry = manage("launch_run", str(CAMPAIGN), "--dry-run")
    assert dry.returncode == 0 and '"estimated_max": "50.40 USD"' in dry.stdout
    in_effect = f'"price_version": "{active_price_version().name}"'
    assert '"funds_sufficient": false' in dry.stdout and in_effect in dry.stdout
    short = one_line_error(manage("launch_run", str(CAMPAIGN)))
    assert "cannot launch this run" in short and "short by 50.40 USD" in short
    assert not Run.objects.exists()

    paid = manage("top_up", "acme", "250.00", "--currency", "USD", "--key", "pay-1")
    assert paid.returncode == 0 and "250.00 USD credited" in paid.stdout
    again = manage("top_up", "acme", "250.00", "--currency", "USD", "--key", "pay-1")
    assert again.returncode == 0 and "already credited" in again.stdout  # idempotent on the key
    assert JournalEntry.objects.filter(kind="top_up").count() == 1
    assert "major units" in one_line_error(manage("top_up", "acme", "1.234", "--key", "pay-2"))
    assert "unknown tenant" in one_line_error(manage("top_up", "nope", "1", "--key", "pay-3"))

    launched = manage("launch_run", str(CAMPAIGN))
    assert launched.returncode == 0 and '"run_id": "' in launched.stdout
    assert Run.objects.count() == 1


def test_grant_role_creates_the_staff_user_and_the_membership_once() -> None:
    Tenant.objects.create(slug="acme", name="Acme")
    first = manage(
        "grant_role", "ann", "acme", "operator", "--password-env", "ANN_PW", ANN_PW=ANN_PASSWORD
    )
    assert first.returncode == 0 and "created user ann: operator in acme" in first.stdout
    second = manage("grant_role", "ann", "acme", "operator")
    assert second.returncode == 0 and "already operator" in second.stdout
    user = get_user_model().objects.get(username="ann")
    assert user.is_staff and not user.is_superuser and user.check_password(ANN_PASSWORD)
    assert list(user.groups.values_list("name", flat=True)) == ["operator"]
    assert TenantMembership.objects.filter(user=user).count() == 1

    assert "unknown tenant 'nope'" in one_line_error(manage("grant_role", "ann", "nope", "analyst"))
    assert "unknown role 'boss'" in one_line_error(manage("grant_role", "ann", "acme", "boss"))

    no_password = manage("grant_role", "bob", "acme", "finance")
    assert no_password.returncode == 0
    assert not get_user_model().objects.get(username="bob").has_usable_password()


def test_grant_role_refuses_a_weak_password_and_makes_no_user() -> None:
    Tenant.objects.create(slug="acme", name="Acme")
    for weak, why in (("a", "too short"), ("314159265358979", "entirely numeric")):
        error = one_line_error(
            manage("grant_role", "ann", "acme", "operator", "--password-env", "PW", PW=weak)
        )
        assert error.startswith("CommandError: password refused:") and why in error, error
    assert not get_user_model().objects.filter(username="ann").exists()
