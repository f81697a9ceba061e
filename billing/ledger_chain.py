"""The ledger's hash chain: history that cannot be rewritten without it showing.

Every journal entry carries `content_hash` (its kind, references, postings and settlements)
and `chain_hash = sha256(chain_prev | content_hash | idempotency_key | memo)`, where
`chain_prev` is the `chain_hash` of the entry chained before it. Editing, deleting, inserting
or appending to any entry, even by someone who switched the database triggers off, breaks
either the entry's own hashes or the link to its successor, and `check_ledger` says which
entry (`verify_chain`). `created_at` is set by the database and is not part of the chain.

Links are made one at a time: `next_link` takes a transaction-scoped PostgreSQL advisory lock,
held until COMMIT, so two transactions never chain onto the same predecessor. It is the last
lock `post_entry` takes (after the account rows), so the lock order stays accounts → chain.
SQLite writes one transaction at a time anyway.

Version 2 links (`chain_version = 2`, every entry written since billing migration 0006) are
an HMAC-SHA256 keyed with `chain_key()`, a secret kept in the settings, not in the database:
someone who edits rows and recomputes the chain without the key is still caught. Entries
written before (`chain_version` NULL) keep their unkeyed sha256 links and verify as before;
they may only come first (a keyed entry is never followed by an unkeyed one). The newest
link is also anchored outside the database by signed checkpoints (billing/checkpoints.py).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

from django.conf import settings
from django.db import connection

from .models import JournalEntry

GENESIS = "0" * 64
# pg_advisory_xact_lock key: an arbitrary constant that names "the ledger chain head".
CHAIN_LOCK_KEY = 0x6C656467  # "ledg"
LIMIT = 50  # broken links reported
KEYED = 2  # chain_version of HMAC links; NULL is the unkeyed sha256 link of earlier entries
# Domain separation: the key derived from DJANGO_SECRET_KEY is used for nothing else.
_DERIVED_KEY_LABEL = b"geo_collect/billing/ledger-chain-key/v1"


class SettlementShape(Protocol):
    @property
    def sample_id(self) -> int: ...
    @property
    def reason(self) -> str: ...
    @property
    def reserved(self) -> int: ...
    @property
    def captured(self) -> int: ...
    @property
    def released(self) -> int: ...


def content_hash(
    *,
    kind: str,
    legs: Sequence[tuple[str, int]],
    refs: dict[str, Any],
    settlements: Sequence[SettlementShape],
) -> str:
    """What an entry says, as a digest: legs are (account code, signed amount)."""
    content = {
        "kind": kind,
        "refs": refs,
        "legs": sorted([code, amount] for code, amount in legs),
        "settlements": sorted(
            [s.sample_id, s.reason, s.reserved, s.captured, s.released, *_round(s)]
            for s in settlements
        ),
    }
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _round(line: SettlementShape) -> list[int]:
    """A resumed sample's settlement round; round 0 hashes as before rounds existed."""
    value = getattr(line, "round", 0)
    return [value] if value else []


def chain_key() -> bytes:
    """GEO_LEDGER_CHAIN_KEY, or else a key derived from DJANGO_SECRET_KEY under a label of
    its own. Changing either without pinning the old key makes every keyed link fail."""
    configured = getattr(settings, "GEO_LEDGER_CHAIN_KEY", "")
    if configured:
        return str(configured).encode()
    return hmac.new(settings.SECRET_KEY.encode(), _DERIVED_KEY_LABEL, hashlib.sha256).digest()


def link_hash(
    *, prev: str, content: str, idempotency_key: str, memo: str, version: int | None = KEYED
) -> str:
    """The entry's link: keyed (version 2) or, for entries written before keys, sha256."""
    if version is None:
        joined = json.dumps([prev, content, idempotency_key, memo], separators=(",", ":"))
        return hashlib.sha256(joined.encode()).hexdigest()
    joined = json.dumps([version, prev, content, idempotency_key, memo], separators=(",", ":"))
    return hmac.new(chain_key(), joined.encode(), hashlib.sha256).hexdigest()


def next_link(*, content: str, idempotency_key: str, memo: str) -> tuple[str, str]:
    """(chain_prev, chain_hash) of a keyed link for the entry about to be inserted. Call inside
    the entry's transaction, right before the INSERT; the chain stays locked until COMMIT."""
    prev = lock_head()
    link = link_hash(prev=prev, content=content, idempotency_key=idempotency_key, memo=memo)
    return prev, link


def lock_head() -> str:
    """Lock the chain (until COMMIT; inside a transaction) and return its newest link: the
    entries inserted next in this transaction chain onto it, in id order."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CHAIN_LOCK_KEY])
    return (
        JournalEntry.objects.exclude(chain_hash=None)
        .order_by("-id")
        .values_list("chain_hash", flat=True)
        .first()
    ) or GENESIS


def stored_content_hash(entry: JournalEntry) -> str:
    """The content hash recomputed from the rows as they are stored now."""
    refs = {
        "tenant": entry.tenant_id,
        "run": str(entry.run_id) if entry.run_id else None,
        "sample": entry.sample_id,
        "capture": entry.capture_id,
        "platform": entry.platform,
        "upstream_id": entry.upstream_id,
        "reverses": entry.reverses_id,
    }
    legs = [(p.account.code, p.amount) for p in entry.postings.all()]
    return content_hash(
        kind=entry.kind, legs=legs, refs=refs, settlements=list(entry.settlements.all())
    )


def _entries() -> Iterator[JournalEntry]:
    return (
        JournalEntry.objects.order_by("id")
        .prefetch_related("postings__account", "settlements")
        .iterator(chunk_size=500)
    )


def _entry_problems(entry: JournalEntry, prev: str, *, keyed_before: bool) -> list[str]:
    problems = []
    if entry.chain_version is None and keyed_before:
        problems.append(
            f"entry #{entry.pk}: unkeyed link after keyed entries (its chain was recomputed "
            "without the key)"
        )
    elif entry.chain_version not in (None, KEYED):
        problems.append(f"entry #{entry.pk}: unknown chain version {entry.chain_version}")
    if stored_content_hash(entry) != entry.content_hash:
        problems.append(
            f"entry #{entry.pk}: its postings, settlements or references no longer match "
            "its content hash (changed or appended after it was written)"
        )
    if entry.chain_prev != prev:
        problems.append(
            f"entry #{entry.pk}: chained to {str(entry.chain_prev)[:12]}…, but the entry "
            f"before it ends the chain at {prev[:12]}… (an entry was removed or inserted)"
        )
    expected = link_hash(
        prev=entry.chain_prev or "",
        content=entry.content_hash,
        idempotency_key=entry.idempotency_key,
        memo=entry.memo,
        version=entry.chain_version,
    )
    if entry.chain_hash != expected:
        problems.append(
            f"entry #{entry.pk}: chain hash does not match its stored fields (edited, or "
            "recomputed without the ledger's key)"
        )
    return problems


def verify_chain() -> list[str]:
    """Walk every entry in id order. Entries written before the chain existed (no
    chain_hash) may only come first; every later entry must link to the one before it."""
    problems: list[str] = []
    prev: str | None = None  # None: still in the unchained prefix
    keyed_before = False
    for entry in _entries():
        if entry.chain_hash is None:
            if entry.chain_version is not None:
                problems.append(f"entry #{entry.pk}: keyed entry without its chain hash")
            elif prev is not None:
                problems.append(f"entry #{entry.pk} is not chained (inserted outside post_entry)")
            continue
        problems += _entry_problems(entry, prev or GENESIS, keyed_before=keyed_before)
        keyed_before = keyed_before or entry.chain_version == KEYED
        prev = entry.chain_hash
        if len(problems) >= LIMIT:
            break
    return problems[:LIMIT]
