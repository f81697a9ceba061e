"""An insider who can write the ledger's tables (the database owner, triggers off) cannot
rewrite it quietly: on a ledger built through the real services (top-ups, a launched run's
hold, a capture batch, the run's settlement, a late capture) each tampering below is named by
`check_ledger`, which compares the database with the chain's keyed links and with the signed
checkpoints those services wrote to the evidence store."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, connection, transaction

from billing import ledger_chain, services
from billing.checkpoints import PREFIX, latest_checkpoint
from billing.models import EntryKind, JournalEntry
from tests.billing.conftest import COLLECTOR, complete, fail, launch, samples, tenant

pytestmark = [
    pytest.mark.postgresql("the owner's trigger switches and sequences"),
    pytest.mark.django_db(transaction=True),  # commits, so the after-commit checkpoints run
    pytest.mark.usefixtures("prices"),
]


@pytest.fixture(autouse=True)
def checkpoint_store(settings: Any, tmp_path: Path) -> Path:
    """The evidence store of this test alone (local files, write-once like production's)."""
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(tmp_path / "media")},
        },
    }
    return tmp_path / "media"


def _real_ledger(*, ends_with: str) -> JournalEntry:
    """Top-up, launch (the hold), a capture batch, the run's settlement (a release), then
    the newest entry: another top-up, or a late capture checkpointed by the periodic writer.
    Returns that newest entry."""
    acme = tenant()
    services.top_up(tenant=acme, amount=100_000, currency="USD", idempotency_key="pay-1")
    run = launch(questions=4, targets=[COLLECTOR])
    first, second, failed, late = samples(run)
    for sample in (first, second):
        complete(sample)
        services.queue_capture(run_id=run.pk, sample_id=sample.pk)
    fail(failed)
    services.settle_run(run_id=run.pk)  # the capture batch, then the release of the failed one
    if ends_with == "top_up":
        services.top_up(tenant=acme, amount=5_000, currency="USD", idempotency_key="pay-2")
    else:
        complete(late)
        services.queue_capture(run_id=run.pk, sample_id=late.pk)
        services.post_pending_captures(run_id=run.pk)
        call_command("checkpoint_ledger", stdout=io.StringIO())
    newest = JournalEntry.objects.order_by("-id").first()
    assert newest is not None
    return newest


def _violations() -> str:
    err = io.StringIO()
    with pytest.raises(CommandError, match="violation"):
        call_command("check_ledger", stdout=io.StringIO(), stderr=err)
    return err.getvalue()


def _as_owner_with_triggers_off(*statements: tuple[str, list[object]]) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        for sql, params in statements:
            cursor.execute(sql, params)


def _delete_entry_quietly(entry: JournalEntry) -> None:
    """Remove the entry with its postings and settlements, and put the cached balances back
    to what the remaining postings say, so that no balance check gives it away."""
    _as_owner_with_triggers_off(
        ("DELETE FROM billing_samplesettlement WHERE entry_id = %s", [entry.pk]),
        (
            "UPDATE billing_account a SET balance = a.balance - p.amount FROM billing_posting p"
            " WHERE p.account_id = a.id AND p.entry_id = %s AND a.tracks_balance",
            [entry.pk],
        ),
        ("DELETE FROM billing_posting WHERE entry_id = %s", [entry.pk]),
        ("DELETE FROM billing_journalentry WHERE id = %s", [entry.pk]),
    )


def test_an_untampered_ledger_passes_and_each_top_up_and_settlement_left_a_checkpoint(
    checkpoint_store: Path,
) -> None:
    newest = _real_ledger(ends_with="top_up")
    out = io.StringIO()
    call_command("check_ledger", stdout=out)
    assert out.getvalue().startswith("ledger OK")
    written = sorted((checkpoint_store / PREFIX).rglob("*.json"))
    assert len(written) == 3  # the first top-up, the run's settlement, the second top-up
    assert json.loads(written[-1].read_text())["entry_id"] == newest.pk
    assert JournalEntry.objects.exclude(chain_version=ledger_chain.KEYED).count() == 0


@pytest.mark.parametrize("ends_with", ["top_up", "capture"])
def test_deleting_the_newest_entry_is_detected(ends_with: str) -> None:
    newest = _real_ledger(ends_with=ends_with)
    assert newest.kind == (EntryKind.TOP_UP if ends_with == "top_up" else EntryKind.CAPTURE)
    assert (ends_with == "capture") == newest.settlements.exists()

    _delete_entry_quietly(newest)

    assert f"entry #{newest.pk} is missing" in _violations()


def test_nulling_the_chain_everywhere_is_detected() -> None:
    newest = _real_ledger(ends_with="top_up")
    _as_owner_with_triggers_off(
        (
            "UPDATE billing_journalentry SET chain_hash = NULL, chain_prev = NULL,"
            " chain_version = NULL",
            [],
        ),
    )
    assert f"entry #{newest.pk}: chain hash None" in _violations()


def _recompute_chain(*, version: int | None, key: bytes | None) -> None:
    """Relink every entry in id order, as someone without the ledger's key must."""
    prev = ledger_chain.GENESIS
    statements = []
    for entry in JournalEntry.objects.order_by("id"):
        if key is None:
            link = ledger_chain.link_hash(
                prev=prev,
                content=entry.content_hash,
                idempotency_key=entry.idempotency_key,
                memo=entry.memo,
                version=None,
            )
        else:
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(ledger_chain, "chain_key", lambda: key)
                link = ledger_chain.link_hash(
                    prev=prev,
                    content=entry.content_hash,
                    idempotency_key=entry.idempotency_key,
                    memo=entry.memo,
                    version=version,
                )
        statements.append(
            (
                "UPDATE billing_journalentry SET chain_prev = %s, chain_hash = %s,"
                " chain_version = %s WHERE id = %s",
                [prev, link, version, entry.pk],
            )
        )
        prev = link
    _as_owner_with_triggers_off(*statements)


@pytest.mark.parametrize(
    ("version", "key", "expected"),
    [
        (None, None, "(the chain was nulled or recomputed)"),  # downgraded to unkeyed links
        (ledger_chain.KEYED, b"a guessed key", "recomputed without the ledger's key"),
    ],
    ids=["unkeyed", "guessed-key"],
)
def test_recomputing_the_chain_after_an_edit_without_the_key_is_detected(
    version: int | None, key: bytes | None, expected: str
) -> None:
    _real_ledger(ends_with="top_up")
    first = JournalEntry.objects.order_by("id").first()
    assert first is not None
    _as_owner_with_triggers_off(
        ("UPDATE billing_journalentry SET memo = 'rewritten' WHERE id = %s", [first.pk])
    )
    _recompute_chain(version=version, key=key)
    assert expected in _violations()


@pytest.fixture
def re_enable() -> Iterator[list[str]]:
    """Triggers a test disables are switched on again, whatever the test did."""
    disabled: list[str] = []
    yield disabled
    with connection.cursor() as cursor:
        for statement in disabled:
            cursor.execute(statement.replace("DISABLE", "ENABLE"))


@pytest.mark.parametrize(
    "disable",
    [
        "ALTER TABLE billing_journalentry DISABLE TRIGGER billing_journalentry_append_only",
        "ALTER TABLE billing_account DISABLE TRIGGER billing_account_opens_at_zero",
        "ALTER TABLE billing_posting DISABLE TRIGGER billing_posting_balanced",
    ],
)
def test_a_disabled_guard_trigger_is_detected(disable: str, re_enable: list[str]) -> None:
    _real_ledger(ends_with="top_up")
    re_enable.append(disable)
    with connection.cursor() as cursor:
        cursor.execute(disable)
    assert f"database triggers disabled: {disable.rsplit(' ', 1)[-1]}" in _violations()


def _move_sequence_to(value_of: Callable[[int], int]) -> int:
    largest = JournalEntry.objects.order_by("-id").values_list("id", flat=True).first() or 0
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('billing_journalentry', 'id'), %s)",
            [value_of(largest)],
        )
    return largest


def test_the_entry_sequence_moved_below_the_largest_id_is_detected() -> None:
    _real_ledger(ends_with="top_up")
    largest = _move_sequence_to(lambda largest: largest - 1)
    assert f"below the largest id {largest}" in _violations()


def test_deleting_the_newest_entry_and_moving_the_sequence_back_is_detected() -> None:
    """The sequence put back to the largest remaining id looks consistent with the table;
    the checkpoint's high-water mark still shows it went back."""
    newest = _real_ledger(ends_with="top_up")
    _delete_entry_quietly(newest)
    _move_sequence_to(lambda largest: largest)
    problems = _violations()
    assert f"below {newest.pk} recorded by" in problems
    assert "(moved back)" in problems


def test_an_account_opened_with_a_balance_is_refused_by_the_database() -> None:
    """The 1000.00 an attacker wrote into a fresh available account: refused at INSERT."""
    stranger = tenant("never-topped-up")
    with pytest.raises(IntegrityError, match="opens at a zero balance"):  # noqa: SIM117
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "INSERT INTO billing_account (code, kind, currency, tenant_id, platform,"
                " tracks_balance, balance, created_at)"
                " VALUES (%s, 'available', 'USD', %s, '', true, 100000, now())",
                [f"available:{stranger.pk}:USD", stranger.pk],
            )
    assert services.available_account(stranger, "USD").balance == 0


def test_a_checkpoint_another_process_is_still_writing_is_not_read_as_the_newest(
    checkpoint_store: Path,
) -> None:
    """Concurrent top-ups each checkpoint after their commit; the filesystem store creates a
    file before writing it. A top-up that found that empty file as the newest failed after its
    commit (a JSONDecodeError out of `top_up`); it reads the one before it instead."""
    acme = tenant()
    services.top_up(tenant=acme, amount=500, currency="USD", idempotency_key="pay-1")
    [written] = (checkpoint_store / PREFIX).rglob("*.json")
    being_written = written.with_name(f"{int(written.stem) + 1:020d}.json")
    being_written.touch()  # created by another process, not yet written

    second = services.top_up(tenant=acme, amount=700, currency="USD", idempotency_key="pay-2")

    lineage = written.relative_to(checkpoint_store / PREFIX).parts[0]
    found = latest_checkpoint(lineage)
    assert found is not None and json.loads(found[1])["entry_id"] == second.pk
    out = io.StringIO()
    call_command("check_ledger", stdout=out)
    assert out.getvalue().startswith("ledger OK")
