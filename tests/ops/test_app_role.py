"""The application's database role (deploy/app_role.sql) is not a superuser and cannot get
around the ledger's triggers: no `session_replication_role`, no TRUNCATE of ledger tables,
no trigger switched off, no sequence moved back, UPDATE/DELETE of ledger rows and an account
opened with a balance are refused by the triggers as for anyone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings
from django.db import connection, transaction
from django.db.utils import DatabaseError

from billing.models import Account, JournalEntry
from tenancy.models import Tenant
from tests.conftest import fund_tenant

pytestmark = pytest.mark.django_db
LEDGER_TABLES = ("billing_journalentry", "billing_posting", "billing_samplesettlement")


@pytest.fixture
def as_app_role() -> Iterator[None]:
    """The documented SQL, run as the owner, then this connection acting as geo_app."""
    sql = (settings.BASE_DIR / "deploy" / "app_role.sql").read_text()
    with connection.cursor() as cursor:
        cursor.execute(sql)
        cursor.execute("SET ROLE geo_app")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET ROLE")


def _refused(statement: str) -> str:
    with pytest.raises(DatabaseError) as refused, transaction.atomic(), connection.cursor() as c:
        c.execute(statement)
    return str(refused.value)


def test_the_app_role_is_not_a_superuser(as_app_role: None) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = current_user")
        assert cursor.fetchone() == (False, False)


def test_the_app_role_cannot_switch_the_triggers_off(as_app_role: None) -> None:
    assert "permission denied" in _refused("SET session_replication_role = replica")


@pytest.mark.parametrize("table", LEDGER_TABLES)
def test_the_app_role_cannot_truncate_the_ledger(as_app_role: None, table: str) -> None:
    assert "permission denied" in _refused(f"TRUNCATE {table} CASCADE")


def test_the_app_role_writes_the_ledger_but_cannot_rewrite_it(as_app_role: None) -> None:
    fund_tenant(Tenant.objects.create(slug="roleco", name="RoleCo"))  # a top-up entry is booked
    assert JournalEntry.objects.filter(tenant__slug="roleco").exists()
    assert "append-only" in _refused("UPDATE billing_journalentry SET memo = 'rewritten'")
    assert "append-only" in _refused("DELETE FROM billing_posting")


def test_the_app_role_cannot_open_an_account_with_a_balance(as_app_role: None) -> None:
    """The attack of issue 28: an `available` account holding 1000.00 for a tenant never
    topped up, which a launch would then have spent."""
    stranger = Tenant.objects.create(slug="never-paid", name="Never paid")
    refusal = _refused(
        "INSERT INTO billing_account (code, kind, currency, tenant_id, platform, tracks_balance,"
        f" balance, created_at) VALUES ('available:{stranger.pk}:USD', 'available', 'USD',"
        f" {stranger.pk}, '', true, 100000, now())"
    )
    assert "opens at a zero balance" in refusal
    assert not Account.objects.filter(tenant=stranger).exists()


def test_the_app_role_cannot_move_the_entry_sequence_back(as_app_role: None) -> None:
    fund_tenant(Tenant.objects.create(slug="seqco", name="SeqCo"))
    refusal = _refused("SELECT setval(pg_get_serial_sequence('billing_journalentry', 'id'), 1)")
    assert "permission denied" in refusal
    fund_tenant(Tenant.objects.create(slug="seqco-2", name="SeqCo 2"))  # nextval still works


def test_the_app_role_cannot_disable_a_ledger_trigger(as_app_role: None) -> None:
    refusal = _refused(
        "ALTER TABLE billing_journalentry DISABLE TRIGGER billing_journalentry_append_only"
    )
    assert "must be owner" in refusal
