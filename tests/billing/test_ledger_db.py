"""The ledger's rules are PostgreSQL's, not only Python's: raw SQL that breaks them is refused
by the database itself."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction

from billing.models import Account, JournalEntry, Posting
from billing.services import available_account, funding_account, top_up
from tests.billing.conftest import tenant

pytestmark = pytest.mark.postgresql("the ledger's database triggers")


def _accounts() -> tuple[Account, Account]:
    acme = tenant()
    return funding_account("USD"), available_account(acme, "USD")


def _raw_entry(cursor: object, key: str) -> int:
    cursor.execute(  # type: ignore[attr-defined]
        "INSERT INTO billing_journalentry (idempotency_key, content_hash, kind, platform,"
        " upstream_id, memo) VALUES (%s, 'x', 'adjustment', '', '', '') RETURNING id",
        [key],
    )
    return int(cursor.fetchone()[0])  # type: ignore[attr-defined]


def _raw_posting(cursor: object, entry_id: int, account_id: int, amount: int) -> None:
    cursor.execute(  # type: ignore[attr-defined]
        "INSERT INTO billing_posting (entry_id, account_id, amount) VALUES (%s, %s, %s)",
        [entry_id, account_id, amount],
    )


# A raw entry that breaks a rule: (the refusal's words, postings as (account, amount)).
REFUSED_RAW_ENTRIES = {
    "raw-unbalanced": ("unbalanced", [("funding", -100), ("available", 99)]),
    "raw-single": ("at least two", [("funding", 5)]),
    "raw-zero": ("posting_amount_non_zero", [("funding", 0)]),
    "raw-overdraft": ("non_negative", [("available", -1), ("funding", 1)]),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("key", list(REFUSED_RAW_ENTRIES))
def test_a_raw_entry_that_breaks_a_ledger_rule_is_refused_and_leaves_nothing(key: str) -> None:
    """Unbalanced (at commit), a single posting, a zero amount, an overdraft of a tracked
    account: each is refused by the database and no entry remains."""
    refusal, postings = REFUSED_RAW_ENTRIES[key]
    funding, available = _accounts()
    accounts = {"funding": funding.pk, "available": available.pk}
    with pytest.raises(IntegrityError, match=refusal):  # noqa: SIM117
        with transaction.atomic(), connection.cursor() as cursor:
            entry_id = _raw_entry(cursor, key)
            for account, amount in postings:
                _raw_posting(cursor, entry_id, accounts[account], amount)
    assert not JournalEntry.objects.filter(idempotency_key=key).exists()


@pytest.mark.django_db(transaction=True)
def test_a_balanced_raw_entry_commits_and_moves_the_cached_balance() -> None:
    funding, available = _accounts()
    with transaction.atomic(), connection.cursor() as cursor:
        entry_id = _raw_entry(cursor, "raw-balanced")
        _raw_posting(cursor, entry_id, funding.pk, -100)
        _raw_posting(cursor, entry_id, available.pk, 100)
    assert Account.objects.get(pk=available.pk).balance == 100


@pytest.mark.django_db(transaction=True)
def test_unbalanced_is_refused_at_the_statement_when_constraints_are_immediate() -> None:
    funding, available = _accounts()
    reached_commit = False
    with pytest.raises(IntegrityError, match="unbalanced"):  # noqa: SIM117
        with transaction.atomic(), connection.cursor() as cursor:
            entry_id = _raw_entry(cursor, "raw-immediate")
            cursor.execute("SET CONSTRAINTS billing_posting_balanced IMMEDIATE")
            cursor.execute(
                "INSERT INTO billing_posting (entry_id, account_id, amount)"
                " VALUES (%s, %s, -7), (%s, %s, 6)",
                [entry_id, funding.pk, entry_id, available.pk],
            )
            reached_commit = True
    assert not reached_commit


@pytest.mark.django_db(transaction=True)
def test_update_of_a_posting_is_refused() -> None:
    acme = tenant()
    entry = top_up(tenant=acme, amount=500, currency="USD", idempotency_key="pay-1")
    posting = entry.postings.first()
    assert posting is not None
    with pytest.raises(IntegrityError, match="append-only"), connection.cursor() as cursor:
        cursor.execute("UPDATE billing_posting SET amount = amount + 1 WHERE id = %s", [posting.pk])
    assert Posting.objects.get(pk=posting.pk).amount == posting.amount


@pytest.mark.django_db(transaction=True)
def test_delete_of_a_posting_is_refused() -> None:
    acme = tenant()
    entry = top_up(tenant=acme, amount=500, currency="USD", idempotency_key="pay-1")
    with pytest.raises(IntegrityError, match="append-only"), connection.cursor() as cursor:
        cursor.execute("DELETE FROM billing_posting WHERE entry_id = %s", [entry.pk])
    assert entry.postings.count() == 2


@pytest.mark.django_db(transaction=True)
def test_update_and_delete_of_an_entry_are_refused() -> None:
    entry = top_up(tenant=tenant(), amount=500, currency="USD", idempotency_key="pay-1")
    with pytest.raises(IntegrityError, match="append-only"), connection.cursor() as cursor:
        cursor.execute("UPDATE billing_journalentry SET memo = 'edited' WHERE id = %s", [entry.pk])
    with pytest.raises(IntegrityError, match="append-only"), connection.cursor() as cursor:
        cursor.execute("DELETE FROM billing_journalentry WHERE id = %s", [entry.pk])


@pytest.mark.django_db(transaction=True)
def test_a_cached_balance_cannot_be_written_directly() -> None:
    _, available = _accounts()
    with pytest.raises(IntegrityError, match="moves only by postings"), connection.cursor() as c:
        c.execute("UPDATE billing_account SET balance = 1000000 WHERE id = %s", [available.pk])
    with pytest.raises(IntegrityError, match="never deleted"), connection.cursor() as c:
        c.execute("DELETE FROM billing_account WHERE id = %s", [available.pk])
