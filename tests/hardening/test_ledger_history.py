"""History cannot be extended or rewritten: on PostgreSQL and on the embedded SQLite.

The same tests run on both databases. Under `make test` they run on PostgreSQL, and
`test_the_same_guarantees_hold_on_sqlite` runs this file again in a child pytest with
DATABASE_URL unset (the embedded SQLite database, migrated from scratch).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction

from billing.checks import verify_ledger
from billing.models import Account, JournalEntry
from billing.services import available_account, funding_account, top_up
from tests.conftest import ensure_tenant

POSTGRES = connection.vendor == "postgresql"
# PostgreSQL's rule is about transactions, so entries must really commit; SQLite's rule holds
# inside one transaction, and SQLite's flush would be refused by the append-only triggers.
ledger_db = pytest.mark.django_db(transaction=POSTGRES)


def _three_entries() -> tuple[Account, Account, list[JournalEntry]]:
    acme = ensure_tenant("acme-ledger")
    entries = [
        top_up(tenant=acme, amount=1000 * n, currency="USD", idempotency_key=f"pay-{n}")
        for n in (1, 2, 3)
    ]
    return funding_account("USD"), available_account(acme, "USD"), entries


def _append(entry_id: int, credit: Account, debit: Account, amount: int) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO billing_posting (entry_id, account_id, amount) VALUES (%s, %s, %s),"
            " (%s, %s, %s)",
            [entry_id, credit.pk, amount, entry_id, debit.pk, -amount],
        )


def _sql(statement: str, params: list[object]) -> None:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


@contextmanager
def triggers_off() -> Iterator[None]:
    """What an attacker with the database's owner rights could do: write past the triggers."""
    if POSTGRES:
        _sql("SET session_replication_role = replica", [])
        try:
            yield
        finally:
            _sql("SET session_replication_role = DEFAULT", [])
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
        saved = cursor.fetchall()
        for name, _ in saved:
            cursor.execute(f'DROP TRIGGER "{name}"')
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            for _, sql in saved:
                cursor.execute(sql)


def _chain_violations() -> list[str]:
    return [v for v in verify_ledger().violations if "triggers missing" not in v]


@ledger_db
def test_appending_to_a_committed_entry_is_refused() -> None:
    funding, available, entries = _three_entries()
    before = Account.objects.get(pk=available.pk).balance
    for entry in (entries[0], entries[-1]):  # an old entry and the newest one
        with pytest.raises(DatabaseError):
            _append(entry.pk, available, funding, 5000)
    assert Account.objects.get(pk=available.pk).balance == before
    assert all(e.postings.count() == 2 for e in entries)


@ledger_db
def test_a_cached_balance_cannot_be_written_directly() -> None:
    _, available, _ = _three_entries()
    before = Account.objects.get(pk=available.pk).balance
    with pytest.raises(DatabaseError), transaction.atomic():
        _sql("UPDATE billing_account SET balance = balance + 5000 WHERE id = %s", [available.pk])
    assert Account.objects.get(pk=available.pk).balance == before


@ledger_db
def test_an_untouched_ledger_verifies_and_every_entry_is_chained() -> None:
    _three_entries()
    assert verify_ledger().ok
    chained = list(JournalEntry.objects.order_by("id").values_list("chain_prev", "chain_hash"))
    assert all(link for _, link in chained)
    assert [prev for prev, _ in chained[1:]] == [link for _, link in chained[:-1]]


def _rewrite_memo(entries: list[JournalEntry], funding: Account, available: Account) -> None:
    _sql("UPDATE billing_journalentry SET memo = 'rewritten' WHERE id = %s", [entries[1].pk])


def _rewrite_amounts(entries: list[JournalEntry], funding: Account, available: Account) -> None:
    _sql("UPDATE billing_posting SET amount = amount * 3 WHERE entry_id = %s", [entries[1].pk])


def _append_past_triggers(
    entries: list[JournalEntry], funding: Account, available: Account
) -> None:
    _append(entries[0].pk, available, funding, 5000)


def _delete_entry(entries: list[JournalEntry], funding: Account, available: Account) -> None:
    _sql("DELETE FROM billing_posting WHERE entry_id = %s", [entries[1].pk])
    _sql("DELETE FROM billing_journalentry WHERE id = %s", [entries[1].pk])


@ledger_db
@pytest.mark.parametrize(
    ("tamper", "entry_index", "expected"),
    [
        (_rewrite_memo, 1, "chain hash does not match"),
        (_rewrite_amounts, 1, "no longer match its content hash"),
        (_append_past_triggers, 0, "no longer match its content hash"),
        (_delete_entry, 2, "an entry was removed or inserted"),
    ],
)
def test_a_tampered_entry_is_caught_by_check_ledger(
    tamper: object, entry_index: int, expected: str
) -> None:
    funding, available, entries = _three_entries()
    with triggers_off():
        tamper(entries, funding, available)  # type: ignore[operator]
    problems = _chain_violations()
    assert any(f"entry #{entries[entry_index].pk}" in p and expected in p for p in problems), (
        problems
    )
    with pytest.raises(CommandError, match="violation"):
        call_command("check_ledger", stdout=io.StringIO(), stderr=io.StringIO())


@pytest.mark.skipif(not POSTGRES, reason="this is the PostgreSQL run starting the SQLite one")
def test_the_same_guarantees_hold_on_sqlite(tmp_path: Path) -> None:
    # The child run is itself one test of this run: its own skip of this test is expected.
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CI")}
    env["GEO_VAR_DIR"] = str(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
         __file__],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "7 passed, 1 skipped" in result.stdout, result.stdout[-2000:]
