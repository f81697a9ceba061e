"""Claiming due work, leases and fencing tokens (docs/architecture.md).

A claim is one conditional UPDATE: it moves due `ready` samples to `leased`, sets
`lease_until` from database time and increments `fencing_token`. Every later write of a
result names the token it was given; a write with an older token is refused and recorded
(the write side is `sampling.transitions`).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction
from django.db.models.functions import Now

from geo_collect import metrics

from .dbtime import now_sql
from .models import QueueState, Sample
from .plainsql import cursor as plain_cursor


@dataclass(frozen=True)
class Fence:
    """A condition a dispatcher's write adds to its WHERE clause, true only while the writer
    still leads (pipeline/leadership.py builds it from the leader lease): the write of a
    leader that lost its lease matches no row. Its parameters are named (`%(name)s`)."""

    sql: str = "1 = 1"
    params: Mapping[str, str | int] = field(default_factory=dict)


NO_FENCE = Fence()  # a caller that is the only dispatcher (tests, the in-process bench)


def fence_holds(fence: Fence) -> bool:
    """Whether the fence still holds, for a transaction that then writes: on PostgreSQL the
    fence locks the leader row (FOR SHARE) until the transaction ends, so a takeover waits
    for it and a write after a takeover is refused."""
    if fence == NO_FENCE:
        return True
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 WHERE {fence.sql}", dict(fence.params))
        return cursor.fetchone() is not None


@dataclass(frozen=True)
class Claim:
    sample_id: int
    token: int
    step: str
    platform: str
    tenant_id: int
    waited_seconds: float = 0.0  # due -> claimed


def lease_ends_after(param: str, *, column: str = "lease_until") -> str:
    """SQL: whether the row's lease (`column`) ends more than `param` seconds from now
    (database time)."""
    return f"({column} IS NOT NULL AND {column} > {_lease_end(param)})"


def _lease_end(param: str) -> str:
    if _pg():
        return f"statement_timestamp() + make_interval(secs => {param})"
    return f"strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '+' || {param} || ' seconds')"


_TAKE_LEASE = """
   SET queue_state = 'leased', lease_until = {lease_end}, lease_owner = %(owner)s,
       fencing_token = fencing_token + 1, claims = claims + 1"""


def _waited(table: str) -> str:
    if _pg():
        return f"EXTRACT(EPOCH FROM statement_timestamp() - {table}due_at)::float8"
    return f"(julianday('now') - julianday({table}due_at)) * 86400.0"


def _returning(table: str = "") -> str:
    return f"RETURNING {table}id, {table}fencing_token, {table}step, {table}platform, " + (
        f"{table}tenant_id, {_waited(table)}"
    )


def _claim_sql(extra_filter: str) -> str:
    candidates = f"""
        SELECT id FROM sampling_sample
         WHERE queue_state = 'ready' AND platform = %(platform)s AND due_at <= {now_sql()}
           {extra_filter}
         ORDER BY due_at
         LIMIT %(limit)s"""
    take = _TAKE_LEASE.format(lease_end=_lease_end("%(lease)s"))
    if _pg():
        # The candidates are picked once, in a materialised CTE: as a plain IN (subquery) the
        # planner may re-run the subquery and, with SKIP LOCKED, lease more than LIMIT rows.
        # Locked candidates are skipped, never waited for.
        return f"""
WITH picked AS MATERIALIZED ({candidates} FOR UPDATE SKIP LOCKED)
UPDATE sampling_sample AS s {take}
  FROM picked WHERE s.id = picked.id
{_returning("s.")}"""
    # SQLite has no row locks; its IMMEDIATE transaction serialises writers, and the state
    # test in the outer WHERE keeps the update conditional all the same.
    return f"""
UPDATE sampling_sample {take}
 WHERE queue_state = 'ready' AND id IN ({candidates})
{_returning()}"""


def claim_ready(
    *,
    platform: str,
    limit: int,
    owner: str,
    lease_seconds: int,
    steps: tuple[str, ...] = (),
    only_tenant: int | None = None,
    fence: Fence = NO_FENCE,
) -> list[Claim]:
    """Lease up to `limit` due samples of one platform (optionally only these steps, only
    this tenant). Concurrent callers never get the same sample: on PostgreSQL locked
    candidates are skipped, not waited for. A claim under a `fence` that no longer holds
    leases nothing."""
    if limit <= 0:
        return []
    params: dict[str, str | int] = {
        "lease": lease_seconds,
        "owner": owner,
        "platform": platform,
        "limit": limit,
        **fence.params,
    }
    filters = [f"AND {fence.sql}"]
    if only_tenant is not None:
        filters.append("AND tenant_id = %(only_tenant)s")
        params["only_tenant"] = only_tenant
    for i, step in enumerate(steps):
        params[f"step{i}"] = step
    if steps:
        filters.append("AND step IN (" + ", ".join(f"%(step{i})s" for i in range(len(steps))) + ")")
    with _one_statement(), connection.cursor() as cursor:
        cursor.execute(_claim_sql(" ".join(filters)), params)
        rows = cursor.fetchall()
    claims = [Claim(*row) for row in rows]
    metrics.observe_claims(claims)
    return claims


def claim_sample(*, sample_id: int, owner: str, lease_seconds: int) -> Claim | None:
    """Lease one specific sample if it is ready or its lease has expired (takeover)."""
    sql = f"""
UPDATE sampling_sample {_TAKE_LEASE.format(lease_end=_lease_end("%(lease)s"))}
 WHERE id = %(id)s
   AND (queue_state = 'ready' OR (queue_state = 'leased' AND lease_until <= {now_sql()}))
{_returning()}"""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, {"id": sample_id, "owner": owner, "lease": lease_seconds})
        row = cursor.fetchone()
    return Claim(*row) if row else None


def renew_lease(*, sample_id: int, token: int, lease_seconds: int, starting: bool = False) -> bool:
    """Extend a lease we still hold. False means it ran out or was taken over: stop working.

    While working, a lease that ran out is never revived (the fenced write would refuse it
    anyway). `starting=True` is the worker's renewal before it does anything: a lease that
    ran out while its message waited in the queue, and that nobody swept or took over, is
    renewed then, since no work was done under it."""
    live = "" if starting else f"AND lease_until > {now_sql()}"
    sql = f"""UPDATE sampling_sample SET lease_until = {_lease_end("%s")}
              WHERE id = %s AND fencing_token = %s AND queue_state = 'leased' {live}"""
    # One statement, its own transaction in autocommit (an atomic block would add a BEGIN and
    # a COMMIT round trip to every step).
    with _one_statement(), plain_cursor() as cursor:  # prepared: in every step
        cursor.execute(sql, [lease_seconds, sample_id, token])
        return cursor.rowcount == 1


def _one_statement() -> AbstractContextManager[Any]:
    """The transaction of a single conditional statement: on PostgreSQL the statement's own
    (autocommit); on SQLite an IMMEDIATE transaction, which serialises writers up front."""
    return nullcontext() if _pg() else transaction.atomic()


def requeue_expired_leases(*, limit: int = 1000, fence: Fence = NO_FENCE) -> int:
    """Make samples whose lease ran out claimable again (the worker died or stalled). Their
    token stays; the next claim increments it, which fences the old worker out."""
    lock = "FOR UPDATE SKIP LOCKED" if _pg() else ""
    sql = f"""UPDATE sampling_sample SET queue_state = 'ready', lease_owner = ''
              WHERE id IN (SELECT id FROM sampling_sample
                            WHERE queue_state = 'leased' AND lease_until <= {now_sql()}
                              AND {fence.sql}
                            LIMIT %(limit)s {lock})"""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql, {"limit": limit, **fence.params})
        return metrics.leases_expired(cursor.rowcount)


def end_all_leases() -> int:
    """Every lease ends now, as if it had run out: for a supervisor whose only worker died
    (whatever it held died with it). The next claim moves the token on, which fences out
    any copy of those messages still waiting in the broker."""
    return Sample.objects.filter(queue_state=QueueState.LEASED).update(lease_until=Now())


def _pg() -> bool:
    return connection.vendor == "postgresql"
