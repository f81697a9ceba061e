"""The lock order, and the one place row locks are taken.

Every transaction that holds more than one row lock takes them in this order, so two
transactions can never wait on each other in a cycle:

0. a campaign's schedule (a scheduled slot's launch, pipeline/schedules.py);
1. the campaign (a launch: one run per preview token);
2. the launching session's row (after its campaign: the preview's token map,
   pipeline/preview.py);
3. the run (cancel, quote hold, finish, a new analysis revision number);
4. the run's hold account in billing (the per-run billing mutex: settle, cancel, capture);
5. sample rows, one at a time, or a set with SKIP LOCKED (claims, fenced writes, operator
   actions, settlements);
6. capture rows (evidence attached to a sample);
7. the other ledger accounts, by primary key ascending (billing's entry posting);
8. the ledger's chain head (a transaction-scoped advisory lock, billing/ledger_chain.py,
   taken right before an entry's INSERT);
9. a campaign rule's unresolved alerts (alerts/evaluation.py: the ones a run may resolve),
   taken with no other lock held.

A transaction may skip levels but never goes back up. The claims in sampling/leases.py lock
sample rows in plain SQL (FOR UPDATE SKIP LOCKED, one statement in autocommit).

`select_for_update` is called here and nowhere else in production code
(tests/sampling/test_locking.py scans the sources). Apps above sampling lock their own rows
by passing a queryset to `locked` with its level: sampling never imports their models, and
every lock in the project names where it sits in the order at the call site.
"""

from __future__ import annotations

from enum import IntEnum
from typing import TypeVar
from uuid import UUID

from django.db import connection, models
from django.db.models import QuerySet

from .dbtime import now_sql
from .models import Campaign, Run, Sample
from .plainsql import columns, from_row
from .plainsql import cursor as plain_cursor

M = TypeVar("M", bound=models.Model)


class Level(IntEnum):
    """The lock order: a transaction takes levels in ascending order only."""

    SCHEDULE = 0
    CAMPAIGN = 1
    SESSION = 2
    RUN = 3
    HOLD_ACCOUNT = 4
    SAMPLE = 5
    CAPTURE = 6
    LEDGER_ACCOUNTS = 7
    # 8 is the ledger chain's advisory lock (billing/ledger_chain.py), not a row lock.
    ALERTS = 9


def locked(
    queryset: QuerySet[M],
    *,
    level: Level,
    skip_locked: bool = False,
    of: tuple[str, ...] = (),
) -> QuerySet[M]:
    """`queryset` with its rows locked FOR UPDATE when evaluated. `level` is the rows' place in
    the order above; the caller holds no lock of a higher level in this transaction.
    `of=("self",)` locks the queryset's own table only, not the rows it joins."""
    # `level` is not needed to build the query: it states the order where the lock is taken,
    # and tests/sampling/test_locking.py checks each function takes its levels ascending.
    return queryset.select_for_update(skip_locked=skip_locked, of=of)


def lock_campaign(campaign_id: int) -> Campaign:
    return locked(Campaign.objects.all(), level=Level.CAMPAIGN).get(pk=campaign_id)


def lock_run(run_id: UUID | str) -> Run:
    return locked(Run.objects.all(), level=Level.RUN).get(pk=run_id)


def lock_sample(sample_id: int) -> Sample:
    return locked(Sample.objects.all(), level=Level.SAMPLE).get(pk=sample_id)


def lock_leased_sample(sample_id: int) -> tuple[Sample, bool]:
    """Lock a sample (level SAMPLE) and tell whether its lease is still running, in database
    time. One plain statement (it runs at least twice per step, so it skips the ORM:
    sampling/plainsql.py)."""
    # SQLite has no row locks: its IMMEDIATE transaction serialises writers.
    lock = "FOR UPDATE" if connection.vendor == "postgresql" else ""
    sql = _LOCK_LEASED.format(columns=columns(Sample, "s"), now=now_sql(), lock=lock)
    with plain_cursor() as cursor:  # prepared: once or more in every step
        cursor.execute(sql, [sample_id])
        row = cursor.fetchone()
    if row is None:
        raise Sample.DoesNotExist(f"sample {sample_id} does not exist")
    return from_row(Sample, row), bool(row[-1])


_LOCK_LEASED = """SELECT {columns}, (s.lease_until IS NOT NULL AND s.lease_until > {now})
  FROM sampling_sample s WHERE s.id = %s {lock}"""
