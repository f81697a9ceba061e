"""Posting journal entries: balanced, idempotent by key, and the reversal of one."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from django.db import IntegrityError, connection, transaction

from billing import ledger_chain
from billing.models import (
    Account,
    EntryKind,
    JournalEntry,
    Posting,
    SampleSettlement,
)
from sampling.locking import Level, locked
from sampling.models import Run
from sampling.plainsql import insert_rows
from tenancy.models import Tenant

from .errors import BillingError, IdempotencyConflict, InsufficientBalance, UnbalancedEntry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SettlementLine:
    sample_id: int
    reason: str
    reserved: int
    captured: int
    released: int
    round: int = 0  # the sample's settlement round (Sample.resumes)


REPLAYED = "replayed"  # set on the entry `post_entry` returns for a key already booked


def _replay(existing: JournalEntry, content_hash: str, key: str) -> JournalEntry:
    if existing.content_hash != content_hash:
        raise IdempotencyConflict(key=key, existing=existing)
    setattr(existing, REPLAYED, True)
    return existing


def was_replayed(entry: JournalEntry) -> bool:
    """Whether `post_entry` answered with the entry an earlier call booked under the same key
    (nothing was booked now): "already credited", not "credited" again."""
    return bool(getattr(entry, REPLAYED, False))


def post_entry(
    *,
    idempotency_key: str,
    kind: str,
    legs: Sequence[tuple[Account, int]],
    tenant: Tenant | None = None,
    run: Run | None = None,
    sample_id: int | None = None,
    capture_id: int | None = None,
    platform: str = "",
    upstream_id: str = "",
    reverses: JournalEntry | None = None,
    settlements: Sequence[SettlementLine] = (),
    memo: str = "",
    guard: Callable[[], None] | None = None,
) -> JournalEntry:
    """Post one balanced journal entry, exactly once per `idempotency_key`.

    `legs` are (account, signed amount); they must sum to zero per currency. Accounts that
    track their balance are locked (in id order, so concurrent entries cannot deadlock) and
    may not go negative. `guard` runs after the locks and the replay check, before the
    insert: the place for checks that depend on the ledger's current state.
    """
    if not idempotency_key or len(idempotency_key) > 200:
        raise BillingError("an idempotency key of 1..200 characters is required")
    _check_legs(legs)
    fields: dict[str, Any] = {
        "kind": kind,
        "tenant": tenant,
        "run": run,
        "sample_id": sample_id,
        "capture_id": capture_id,
        "platform": platform,
        "upstream_id": upstream_id,
        "reverses": reverses,
        "memo": memo,
    }
    content_hash = ledger_chain.content_hash(
        kind=kind,
        legs=[(a.code, amount) for a, amount in legs],
        refs=_refs(fields),
        settlements=settlements,
    )
    with transaction.atomic():
        existing = JournalEntry.objects.filter(idempotency_key=idempotency_key).first()
        if existing is not None:
            return _replay(existing, content_hash, idempotency_key)
        tracked = _lock_tracked(legs)
        # Another transaction may have committed this key while we waited for the locks.
        existing = JournalEntry.objects.filter(idempotency_key=idempotency_key).first()
        if existing is not None:
            return _replay(existing, content_hash, idempotency_key)
        _check_balances(legs, tracked)
        if guard is not None:
            guard()
        try:
            entry = _insert(idempotency_key, content_hash, fields, legs, settlements)
        except IntegrityError:
            existing = JournalEntry.objects.filter(idempotency_key=idempotency_key).first()
            if existing is None:
                raise
            return _replay(existing, content_hash, idempotency_key)
    log.info("ledger entry %s key=%s kind=%s", entry.pk, idempotency_key, kind)
    return entry


def _check_legs(legs: Sequence[tuple[Account, int]]) -> None:
    if len(legs) < 2:
        raise UnbalancedEntry("a journal entry needs at least two postings")
    totals: dict[str, int] = defaultdict(int)
    for account, amount in legs:
        if isinstance(amount, bool) or not isinstance(amount, int) or amount == 0:
            raise BillingError(f"posting amounts are non-zero integers, got {amount!r}")
        totals[account.currency] += amount
    unbalanced = {currency: total for currency, total in totals.items() if total != 0}
    if unbalanced:
        raise UnbalancedEntry(f"postings must sum to zero per currency; they sum to {unbalanced}")


def _refs(fields: dict[str, Any]) -> dict[str, Any]:
    """What the entry points at, as the content hash records it (billing/ledger_chain.py)."""
    tenant, run, reverses = fields["tenant"], fields["run"], fields["reverses"]
    return refs_of(
        tenant_id=tenant.pk if tenant else None,
        run_id=run.pk if run else None,
        sample_id=fields["sample_id"],
        capture_id=fields["capture_id"],
        platform=fields["platform"],
        upstream_id=fields["upstream_id"],
        reverses_id=reverses.pk if reverses else None,
    )


def refs_of(
    *,
    tenant_id: int | None,
    run_id: Any,
    sample_id: int | None,
    capture_id: int | None,
    platform: str,
    upstream_id: str,
    reverses_id: int | None,
) -> dict[str, Any]:
    """The references of an entry by id, the one shape both posting paths hash: an entry
    booked by `post_entry` and the same one by `post_untracked_entries` have the same
    content hash, so either replays the other."""
    return {
        "tenant": tenant_id,
        "run": str(run_id) if run_id else None,
        "sample": sample_id,
        "capture": capture_id,
        "platform": platform,
        "upstream_id": upstream_id,
        "reverses": reverses_id,
    }


def _lock_tracked(legs: Sequence[tuple[Account, int]]) -> dict[int, Account]:
    """Lock the balance-tracked accounts, in id order so concurrent entries cannot deadlock."""
    tracked_ids = sorted({a.pk for a, _ in legs if a.tracks_balance})
    accounts = locked(
        Account.objects.filter(pk__in=tracked_ids).order_by("pk"), level=Level.LEDGER_ACCOUNTS
    )
    return {a.pk: a for a in accounts}


def _check_balances(legs: Sequence[tuple[Account, int]], tracked: dict[int, Account]) -> None:
    changes: dict[int, int] = defaultdict(int)
    for account, amount in legs:
        if account.tracks_balance:
            changes[account.pk] += amount
    for account_id, change in changes.items():
        current = tracked[account_id]
        if current.balance + change < 0:
            raise InsufficientBalance(account=current, balance=current.balance, change=change)


def _insert(
    idempotency_key: str,
    content_hash: str,
    fields: dict[str, Any],
    legs: Sequence[tuple[Account, int]],
    settlements: Sequence[SettlementLine],
) -> JournalEntry:
    """The entry, its postings and settlements, linked into the hash chain. The chain lock
    is the last lock taken (after the accounts); it is held until COMMIT."""
    chain_prev, chain_hash = ledger_chain.next_link(
        content=content_hash, idempotency_key=idempotency_key, memo=fields["memo"]
    )
    with transaction.atomic():
        entry = JournalEntry.objects.create(
            idempotency_key=idempotency_key,
            content_hash=content_hash,
            chain_prev=chain_prev,
            chain_hash=chain_hash,
            chain_version=ledger_chain.KEYED,
            **fields,
        )
        # One INSERT for all postings: balanced at the end of the statement, so it also
        # passes with the zero-sum trigger set IMMEDIATE. Credits before debits: no proper
        # prefix balances, which SQLite's append guard relies on (billing migration 0003).
        Posting.objects.bulk_create(
            Posting(entry=entry, account=account, amount=amount)
            for account, amount in sorted(legs, key=lambda leg: -leg[1])
        )
        SampleSettlement.objects.bulk_create(
            SampleSettlement(entry=entry, run=fields["run"], **asdict(line)) for line in settlements
        )
    return entry


@dataclass(frozen=True)
class UntrackedEntry:
    """One entry of `post_untracked_entries`: legs on accounts that track no balance."""

    idempotency_key: str
    kind: str
    legs: Sequence[tuple[Account, int]]
    tenant_id: int | None = None
    run_id: Any = None
    sample_id: int | None = None
    platform: str = ""
    upstream_id: str = ""
    memo: str = ""


def post_untracked_entries(entries: Sequence[UntrackedEntry]) -> int:
    """Post many entries whose accounts track no balance (upstream costs), each exactly once
    per idempotency key as `post_entry` would, in one transaction that takes the chain lock
    once: the dispatcher books a tick's attempt costs this way, in a few statements instead of
    about ten per entry (docs/decisions.md, "Attempt costs are booked per tick"). A key already
    booked with the same content is skipped; with other content it is logged and skipped
    (`post_entry` raises IdempotencyConflict, which its callers log). Returns how many of
    the entries are in the ledger now, posted or replayed (as `post_entry` returns both)."""
    if any(account.tracks_balance for entry in entries for account, _ in entry.legs):
        raise BillingError("post_untracked_entries takes no balance-tracked account")
    hashed: dict[str, tuple[UntrackedEntry, str]] = {}
    for entry in entries:
        _check_legs(entry.legs)
        refs = refs_of(
            tenant_id=entry.tenant_id,
            run_id=entry.run_id,
            sample_id=entry.sample_id,
            capture_id=None,
            platform=entry.platform,
            upstream_id=entry.upstream_id,
            reverses_id=None,
        )
        legs = [(a.code, amount) for a, amount in entry.legs]
        digest = ledger_chain.content_hash(kind=entry.kind, legs=legs, refs=refs, settlements=())
        hashed[entry.idempotency_key] = (entry, digest)
    if not hashed:
        return 0
    with transaction.atomic():
        # The chain lock first: every entry's INSERT takes it and holds it until COMMIT, so
        # once it is held every key booked before is visible and none can be booked meanwhile.
        prev = ledger_chain.lock_head()
        booked = dict(
            JournalEntry.objects.filter(idempotency_key__in=list(hashed)).values_list(
                "idempotency_key", "content_hash"
            )
        )
        rows: list[JournalEntry] = []
        replayed = 0
        for key, (entry, digest) in hashed.items():
            if key in booked:
                if booked[key] != digest:
                    log.warning("ledger entry key=%s booked before with other content", key)
                else:
                    replayed += 1
                continue
            link = ledger_chain.link_hash(
                prev=prev, content=digest, idempotency_key=key, memo=entry.memo
            )
            rows.append(
                JournalEntry(
                    idempotency_key=key,
                    content_hash=digest,
                    chain_prev=prev,
                    chain_hash=link,
                    chain_version=ledger_chain.KEYED,
                    kind=entry.kind,
                    tenant_id=entry.tenant_id,
                    run_id=entry.run_id,
                    sample_id=entry.sample_id,
                    platform=entry.platform,
                    upstream_id=entry.upstream_id,
                    memo=entry.memo,
                )
            )
            prev = link
        if connection.vendor == "postgresql":
            # Ids are assigned in list order, so the chain follows the id order that
            # verify_chain walks; postings of all entries in one INSERT (each entry balances,
            # the zero-sum trigger checks at COMMIT). Plain INSERTs (sampling/plainsql.py):
            # the ORM's compiler cost more than the statements, once a second.
            insert_rows(rows)
            insert_rows(
                [
                    Posting(entry=row, account=account, amount=amount)
                    for row in rows
                    for account, amount in sorted(
                        hashed[row.idempotency_key][0].legs, key=lambda leg: -leg[1]
                    )
                ]
            )
        else:  # SQLite's append guard takes postings for the newest entry only
            for row in rows:
                row.save(force_insert=True)
                Posting.objects.bulk_create(
                    Posting(entry=row, account=account, amount=amount)
                    for account, amount in sorted(
                        hashed[row.idempotency_key][0].legs, key=lambda leg: -leg[1]
                    )
                )
    for row in rows:
        log.info("ledger entry %s key=%s kind=%s", row.pk, row.idempotency_key, row.kind)
    return len(rows) + replayed


def reverse_entry(*, entry: JournalEntry, idempotency_key: str, memo: str = "") -> JournalEntry:
    """Correct an entry by posting its exact opposite; the original stays as it was.
    Entries that settled samples cannot be reversed (a sample's disposition is final);
    correct those with an adjustment or a refund."""
    if entry.settlements.exists():
        raise BillingError(f"entry #{entry.pk} settled samples; use a refund or an adjustment")
    legs = [(p.account, -p.amount) for p in entry.postings.select_related("account")]
    return post_entry(
        idempotency_key=idempotency_key,
        kind=EntryKind.REVERSAL,
        legs=legs,
        tenant=entry.tenant,
        run=entry.run,
        sample_id=entry.sample_id,
        platform=entry.platform,
        upstream_id=entry.upstream_id,
        reverses=entry,
        memo=memo or f"reversal of entry #{entry.pk}",
    )
