"""Signed checkpoints of the ledger chain's head, kept outside the database (evidence store).

The chain (billing/ledger_chain.py) shows an edit anywhere in history, but not the loss of
its newest entries, nor a chain nulled or rebuilt from scratch. A checkpoint closes that: it
says "entry #N with chain hash H was the newest; C entries existed up to it, their postings
moved V per currency, and the entry id sequence had reached Q", signed with an HMAC under the
chain's key (a label of its own) and written once to the evidence store, whose keys are never
overwritten (evidence/storage.py). `check_ledger` compares the database with the newest
checkpoint (`checkpoint_problems`): entry #N must exist and carry H, the counts and volumes up
to it must match, the sequence must not be below Q, and entries older than twice
GEO_LEDGER_CHECKPOINT_MINUTES must be covered by one.

Checkpoints are written after the commit of every top-up and every run's settlement, and at
most every GEO_LEDGER_CHECKPOINT_MINUTES from the dispatcher (`checkpoint_if_due`) or
`manage.py checkpoint_ledger`. A writer never signs over a ledger that no longer holds the
previous checkpoint's head: it logs the problem and writes nothing.

Keys: `ledger/checkpoints/<lineage>/<N // 100000>/<N>.json`, names zero-padded so the newest
sorts last. The lineage names one ledger: a keyed digest of the database (name and oid) and
the first entry (its id and idempotency key), so a test database flushed between tests or
created again, or another deployment sharing the bucket, starts afresh. Removing the first
entry therefore starts a new lineage too; the age rule still reports the entries no
checkpoint covers.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import timedelta
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from django.conf import settings
from django.core.files.storage import Storage
from django.db import connection
from django.db.models import DateTimeField, ExpressionWrapper, Max, Min, Sum, Value
from django.db.models.functions import Now

from evidence.storage import evidence_storage, put_new
from sampling.dbtime import db_now

from .ledger_chain import chain_key
from .models import JournalEntry, Posting

log = logging.getLogger(__name__)

PREFIX = "ledger/checkpoints"
BUCKET = 100_000  # entries per folder, so finding the newest lists two short folders
FORMAT = 1
_LABEL = b"geo_collect/billing/ledger-checkpoint/v1"
STORAGE_ERRORS = (OSError, BotoCoreError, ClientError)


@dataclass(frozen=True)
class Checkpoint:
    lineage: str
    entry_id: int
    chain_hash: str
    count: int  # entries with id <= entry_id
    volume: dict[str, int]  # per currency: the positive postings of those entries
    sequence: int  # the entry id sequence's value when written (its high-water mark)
    written_at: str  # database time
    format: int = FORMAT
    mac: str = field(default="", compare=False)

    def _body(self) -> bytes:
        fields = asdict(self)
        fields.pop("mac")
        return json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()

    def signed(self) -> Checkpoint:
        return replace(self, mac=_mac(self._body()))

    @property
    def authentic(self) -> bool:
        return hmac.compare_digest(self.mac, _mac(self._body()))

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True, indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Checkpoint:
        return cls(**json.loads(data))

    @property
    def key(self) -> str:
        return f"{PREFIX}/{self.lineage}/{self.entry_id // BUCKET:08d}/{self.entry_id:020d}.json"


def _mac(body: bytes) -> str:
    signing_key = hmac.new(chain_key(), _LABEL, hashlib.sha256).digest()
    return hmac.new(signing_key, body, hashlib.sha256).hexdigest()


# --- the database side ----------------------------------------------------------------------


def lineage() -> str | None:
    """The name of this ledger in the checkpoint store; None while it has no entries."""
    first = JournalEntry.objects.order_by("id").values_list("id", "idempotency_key").first()
    if first is None:
        return None
    name = json.dumps([connection.settings_dict["NAME"], _database_oid(), *first], default=str)
    return hmac.new(chain_key(), name.encode(), hashlib.sha256).hexdigest()[:16]


def _database_oid() -> int | None:
    """PostgreSQL's id of this database: a database created again (a fresh test database, a
    restore into a new one) whose sequences start over is another ledger."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute("SELECT oid FROM pg_database WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


def sequence_value(table: str = "billing_journalentry") -> int:
    """The last value of `table`'s id sequence (PostgreSQL), or its SQLite AUTOINCREMENT
    counter; 0 on other databases."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
            sequence = cursor.fetchone()[0]
            cursor.execute(f"SELECT last_value, is_called FROM {sequence}")  # a catalog name
            last_value, is_called = cursor.fetchone()
            return int(last_value) if is_called else int(last_value) - 1  # the last one used
        if connection.vendor != "sqlite":
            return 0
        cursor.execute("SELECT seq FROM sqlite_sequence WHERE name = %s", [table])
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def _volume(entries: Any) -> dict[str, int]:
    rows = (
        Posting.objects.filter(entry__in=entries, amount__gt=0)
        .values("account__currency")
        .annotate(total=Sum("amount"))
        .order_by()
    )
    return {row["account__currency"]: int(row["total"]) for row in rows}


def _add(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {c: a.get(c, 0) + b.get(c, 0) for c in sorted({*a, *b})}


def _state_up_to(entry_id: int, *, after: Checkpoint | None = None) -> tuple[int, dict[str, int]]:
    """(count, volume) of the entries up to `entry_id`; from `after` on when given, so the
    writer reads only what was added since the previous checkpoint."""
    entries = JournalEntry.objects.filter(id__lte=entry_id)
    if after is not None:
        entries = entries.filter(id__gt=after.entry_id)
    count, volume = entries.count(), _volume(entries.values("id"))
    if after is None:
        return count, volume
    return after.count + count, _add(after.volume, volume)


# --- the store side -------------------------------------------------------------------------


def _names(storage: Storage, folder: str, *, dirs: bool) -> list[str]:
    """The bucket folders (`dirs`) or checkpoint files of `folder`, newest first."""
    try:
        folders, files = storage.listdir(folder)
    except FileNotFoundError:
        return []
    return sorted(folders if dirs else [f for f in files if f.endswith(".json")], reverse=True)


def latest_checkpoint(name: str, *, storage: Storage | None = None) -> tuple[str, bytes] | None:
    """(key, bytes) of the newest checkpoint of lineage `name`, or None. A file with nothing
    in it yet is a checkpoint another process is writing (the filesystem store creates the
    file, then writes it; concurrent top-ups each write one after their commit): the one
    before it is the newest written."""
    target = storage or evidence_storage()
    root = f"{PREFIX}/{name}"
    for bucket in _names(target, root, dirs=True):
        for newest in _names(target, f"{root}/{bucket}", dirs=False):
            key = f"{root}/{bucket}/{newest}"
            with target.open(key, "rb") as handle:
                data: bytes = handle.read()
            if data:
                return key, data
    return None


def _read(name: str) -> Checkpoint | None:
    found = latest_checkpoint(name)
    if found is None:
        return None
    checkpoint = Checkpoint.from_json(found[1])
    return checkpoint if checkpoint.authentic else None


def _continuity_problem(previous: Checkpoint) -> str | None:
    head = JournalEntry.objects.filter(pk=previous.entry_id).values_list("chain_hash").first()
    if head is None or head[0] != previous.chain_hash:
        return f"entry #{previous.entry_id} of the previous checkpoint is gone or changed"
    if sequence_value() < previous.sequence:
        return f"the entry id sequence went back below {previous.sequence}"
    return None


def write_checkpoint() -> Checkpoint | None:
    """Sign and store the chain's current head, unless nothing was added since the newest
    checkpoint. Call outside a transaction (object storage I/O). Refuses (logs, writes
    nothing) when the ledger no longer holds the previous checkpoint's head."""
    name = lineage()
    if name is None:
        return None
    head = JournalEntry.objects.order_by("-id").values("id", "chain_hash").first()
    previous = _read(name)
    if head is None or head["chain_hash"] is None:
        log.error("ledger checkpoint: the newest entry is not chained; nothing signed")
        return None
    if previous is not None:
        if previous.entry_id == head["id"]:
            return previous
        problem = _continuity_problem(previous)
        if problem:
            log.error("ledger checkpoint refused: %s (run check_ledger)", problem)
            return None
    count, volume = _state_up_to(head["id"], after=previous)
    checkpoint = Checkpoint(
        lineage=name,
        entry_id=head["id"],
        chain_hash=head["chain_hash"],
        count=count,
        volume=volume,
        sequence=max(sequence_value(), head["id"]),
        written_at=db_now().isoformat(),
    ).signed()
    stored = put_new(key=checkpoint.key, content=checkpoint.to_json(), mime="application/json")
    log.info("ledger checkpoint: entry #%s as %s", checkpoint.entry_id, stored.key)
    return checkpoint


def checkpoint_quietly() -> None:
    """write_checkpoint for after-commit hooks: a storage outage is logged, never raised
    into the top-up or settlement that already committed (the next checkpoint covers it)."""
    try:
        write_checkpoint()
    except STORAGE_ERRORS:
        log.exception("ledger checkpoint: the evidence store refused the write")


_last_periodic = float("-inf")


def checkpoint_if_due() -> None:
    """At most every GEO_LEDGER_CHECKPOINT_MINUTES in this process (the dispatcher's tick)."""
    global _last_periodic
    if time.monotonic() - _last_periodic < settings.GEO_LEDGER_CHECKPOINT_MINUTES * 60:
        return
    _last_periodic = time.monotonic()
    checkpoint_quietly()


# --- what check_ledger compares ---------------------------------------------------------------


def _uncovered(after_id: int) -> list[str]:
    """Entries past the newest checkpoint that are too old to be waiting for one."""
    grace = timedelta(minutes=2 * settings.GEO_LEDGER_CHECKPOINT_MINUTES)
    cutoff = ExpressionWrapper(Now() - Value(grace), output_field=DateTimeField())
    old = JournalEntry.objects.filter(id__gt=after_id, created_at__lt=cutoff).aggregate(
        first=Min("id"), last=Max("id")
    )
    if old["first"] is None:
        return []
    return [
        f"entries #{old['first']}..#{old['last']} are older than {grace} and no checkpoint "
        "covers them (the checkpoints were removed, the first entry was deleted, or no "
        "writer runs: manage.py checkpoint_ledger)"
    ]


def checkpoint_problems() -> list[str]:
    """The database against the newest checkpoint of this ledger."""
    name = lineage()
    if name is None:
        return []
    found = latest_checkpoint(name)
    if found is None:
        return _uncovered(0)
    key, data = found
    checkpoint = Checkpoint.from_json(data)
    if not checkpoint.authentic:
        return [f"checkpoint {key}: its signature does not verify (forged, or another key)"]
    return _head_problems(checkpoint, key) + _uncovered(checkpoint.entry_id)


def _head_problems(checkpoint: Checkpoint, key: str) -> list[str]:
    n, at = checkpoint.entry_id, f"the checkpoint of {checkpoint.written_at} ({key})"
    head = JournalEntry.objects.filter(pk=n).values_list("chain_hash", flat=True).first()
    problems = []
    if not JournalEntry.objects.filter(pk=n).exists():
        problems.append(f"entry #{n} is missing: {at} names it as the chain's head (deleted)")
    elif head != checkpoint.chain_hash:
        problems.append(
            f"entry #{n}: chain hash {str(head)[:12]}… is not {checkpoint.chain_hash[:12]}… "
            f"recorded by {at} (the chain was nulled or recomputed)"
        )
    count, volume = _state_up_to(n)
    if count != checkpoint.count:
        problems.append(f"{count} entries up to #{n}, but {at} counted {checkpoint.count}")
    if volume != checkpoint.volume:
        problems.append(f"postings up to #{n} move {volume}, but {at} recorded {checkpoint.volume}")
    sequence = sequence_value()
    if sequence < checkpoint.sequence:
        problems.append(
            f"the entry id sequence is at {sequence}, below {checkpoint.sequence} recorded by "
            f"{at} (moved back)"
        )
    return problems
