"""The lock order, in one place.

Every transaction that holds more than one row lock takes them in this order, so two
transactions can never wait on each other in a cycle:

0. a campaign's schedule (a scheduled slot's launch, pipeline/schedules.py);
1. the campaign (a launch: one run per preview token);
2. the run (cancel, quote hold, finish);
3. the run's hold account in billing (the per-run billing mutex: settle, cancel, capture);
4. sample rows, one at a time, or a set with SKIP LOCKED (claims, fenced writes, operator
   actions, settlements);
5. capture rows (evidence attached to a sample);
6. the other ledger accounts, by primary key ascending (billing's entry posting).

A transaction may skip levels but never goes back up. The helpers below take levels 1, 2 and 4;
billing takes levels 3 and 6 itself (billing/services).
"""

from __future__ import annotations

from uuid import UUID

from django.db import connection

from .dbtime import now_sql
from .models import Campaign, Run, Sample
from .plainsql import columns, from_row


def lock_campaign(campaign_id: int) -> Campaign:
    return Campaign.objects.select_for_update().get(pk=campaign_id)


def lock_run(run_id: UUID | str) -> Run:
    return Run.objects.select_for_update().get(pk=run_id)


def lock_sample(sample_id: int) -> Sample:
    return Sample.objects.select_for_update().get(pk=sample_id)


def lock_leased_sample(sample_id: int) -> tuple[Sample, bool]:
    """Lock a sample and tell whether its lease is still running, in database time. One
    plain statement (it runs at least twice per step, so it skips the ORM: sampling/plainsql.py)."""
    # SQLite has no row locks: its IMMEDIATE transaction serialises writers.
    lock = "FOR UPDATE" if connection.vendor == "postgresql" else ""
    sql = _LOCK_LEASED.format(columns=columns(Sample, "s"), now=now_sql(), lock=lock)
    with connection.cursor() as cursor:
        cursor.execute(sql, [sample_id])
        row = cursor.fetchone()
    if row is None:
        raise Sample.DoesNotExist(f"sample {sample_id} does not exist")
    return from_row(Sample, row), bool(row[-1])


_LOCK_LEASED = """SELECT {columns}, (s.lease_until IS NOT NULL AND s.lease_until > {now})
  FROM sampling_sample s WHERE s.id = %s {lock}"""
