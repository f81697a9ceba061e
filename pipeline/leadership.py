"""Who runs admission control: the leader lease of the dispatcher (docs/architecture.md,
"The dispatcher"; docs/decisions.md, "A leader lease that a stopped dispatcher loses").

Only one dispatcher dispatches at a time (its caps and rate limiters are per process). The
leader holds the `pipeline_leaderlease` row of its role: `holder`, `epoch` and `lease_until`
(database time). It moves `lease_until` on every tick with one conditional UPDATE whose row
count it checks; a standby looks every GEO_LEADER_CHECK_SECONDS and takes over with a
conditional UPDATE that increments the epoch once the lease has passed, or at once when the
holder's PostgreSQL session is gone (a killed or exited dispatcher). Every write the leader
makes carries `fence()`, a condition on its epoch: after a takeover the old leader's writes
match no row, however late they arrive.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

from django.conf import settings
from django.db import OperationalError, connection, transaction
from psycopg import errors as pg_errors

from geo_collect import metrics
from sampling.dbtime import now_sql
from sampling.leases import Fence

log = logging.getLogger(__name__)

DISPATCHER = "dispatcher"
_TABLE = "pipeline_leaderlease"


def _pg() -> bool:
    return connection.vendor == "postgresql"


def _lease_end() -> str:
    if _pg():
        return "statement_timestamp() + make_interval(secs => %(lease)s)"
    return "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', '+' || %(lease)s || ' seconds')"


def _backend_pid() -> str:
    return "pg_backend_pid()" if _pg() else "NULL"


def _takeover_due() -> str:
    """The lease has passed, or (PostgreSQL) the holder's session is gone: a dispatcher that
    was killed or exited need not be waited out."""
    expired = f"lease_until < {now_sql()}"
    if not _pg():
        return expired
    return (
        f"({expired} OR backend_pid IS NULL"
        " OR NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = backend_pid))"
    )


def _stale_seconds() -> str:
    if _pg():
        return "EXTRACT(EPOCH FROM statement_timestamp() - lease_until)::float8"
    return "(julianday('now') - julianday(lease_until)) * 86400.0"


@dataclass
class Leadership:
    """This process's side of the lease: standing by, or leading under `epoch`."""

    holder: str
    name: str = DISPATCHER
    lease_seconds: float = field(default_factory=lambda: float(settings.GEO_LEADER_LEASE_SECONDS))
    check_seconds: float = field(default_factory=lambda: float(settings.GEO_LEADER_CHECK_SECONDS))
    epoch: int | None = None  # None: standing by
    valid_until: float = -math.inf  # monotonic: the lease surely holds until then
    next_check: float = -math.inf  # monotonic: a standby's next look at the lease

    @property
    def leading(self) -> bool:
        return self.epoch is not None

    def hold(self) -> bool:
        """Called once per tick: the leader renews (one statement), a standby looks at most
        every `check_seconds` whether it may take over. True: this process leads now."""
        if self.epoch is not None:
            return self._renew()
        if time.monotonic() < self.next_check:
            return False
        self.next_check = time.monotonic() + self.check_seconds
        return self._take_over()

    def may_act(self) -> bool:
        """Without a statement: the lease renewed last surely still holds (the monotonic clock
        runs on while a process is stopped). Work that cannot be fenced in the database (a
        publish) is skipped once it does not, until the next renewal says whether we lead."""
        return self.epoch is not None and time.monotonic() < self.valid_until

    def fence(self) -> Fence:
        """The condition every write of the leader carries. On PostgreSQL it locks the leader
        row FOR SHARE for the writing statement (or transaction): a takeover (an UPDATE of the
        row) waits for a write in progress, and a write that starts after a takeover sees the
        new epoch (READ COMMITTED re-checks a locked row's latest version) and matches
        nothing."""
        lock = " FOR SHARE" if _pg() else ""
        sql = (
            f"EXISTS (SELECT 1 FROM {_TABLE} WHERE name = %(leader_name)s"
            f" AND holder = %(leader_holder)s AND epoch = %(leader_epoch)s{lock})"
        )
        params: dict[str, str | int] = {
            "leader_name": self.name,
            "leader_holder": self.holder,
            "leader_epoch": -1,
        }
        if self.epoch is not None:
            params["leader_epoch"] = self.epoch
        return Fence(sql, params)

    def release(self) -> None:
        """Hand the lease over now (a clean exit): a standby need not wait it out."""
        if self.epoch is None:
            return
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {_TABLE} SET lease_until = {now_sql()}, backend_pid = NULL"
                " WHERE name = %(name)s AND holder = %(holder)s AND epoch = %(epoch)s",
                {"name": self.name, "holder": self.holder, "epoch": self.epoch},
            )
        self._step_down()

    def _renew(self) -> bool:
        started = time.monotonic()  # before the statement: the lease runs from no later
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {_TABLE} SET lease_until = {_lease_end()}, backend_pid = {_backend_pid()}"
                " WHERE name = %(name)s AND holder = %(holder)s AND epoch = %(epoch)s",
                {**self._mine(), "lease": self.lease_seconds},
            )
            renewed = cursor.rowcount == 1
        if renewed:
            self.valid_until = started + self.lease_seconds
            return True
        log.warning(
            "leadership lost: %s no longer holds the %s lease (epoch %s); standing by",
            self.holder,
            self.name,
            self.epoch,
        )
        metrics.leadership_lost(role=self.name)
        self._step_down()
        return False

    def _take_over(self) -> bool:
        seen = self._read()
        if seen is None:
            self._create()
            seen = self._read()
        if seen is None or not seen[3]:
            return False
        old_holder, old_epoch, stale_seconds, _ = seen
        started = time.monotonic()
        try:
            taken = self._conditional_takeover(old_epoch)
        except OperationalError as error:
            if not isinstance(error.__cause__, pg_errors.LockNotAvailable):
                raise
            log.info("takeover of %s waited too long on the old leader's lock", self.name)
            return False
        if not taken:
            return False  # another standby was first, or the leader renewed meanwhile
        self.epoch, self.valid_until = old_epoch + 1, started + self.lease_seconds
        why = (
            f"lease stale for {stale_seconds:.1f}s"
            if stale_seconds >= 0
            else f"old holder's session gone, {-stale_seconds:.1f}s of lease left"
        )
        log.warning(
            "leadership taken over: holder=%s old_holder=%s epoch=%s %s",
            self.holder,
            old_holder or "-",
            self.epoch,
            why,
        )
        metrics.leadership_taken(role=self.name)
        metrics.leading(role=self.name, leads=True)
        return True

    def _conditional_takeover(self, old_epoch: int) -> bool:
        """One conditional UPDATE on the epoch seen and on the takeover still being due (the
        leader may have renewed since the read). On PostgreSQL it waits for a lock held by the
        old leader (a write in progress) no longer than a few seconds."""
        sql = (
            f"UPDATE {_TABLE} SET holder = %(holder)s, epoch = epoch + 1,"
            f" lease_until = {_lease_end()}, acquired_at = {now_sql()},"
            f" backend_pid = {_backend_pid()}"
            f" WHERE name = %(name)s AND epoch = %(old_epoch)s AND {_takeover_due()}"
        )
        params: dict[str, str | int | float] = {
            "name": self.name,
            "holder": self.holder,
            "old_epoch": old_epoch,
            "lease": self.lease_seconds,
        }
        with transaction.atomic(), connection.cursor() as cursor:
            if _pg():
                cursor.execute("SET LOCAL lock_timeout = '3s'")
            cursor.execute(sql, params)
            return cursor.rowcount == 1

    def _read(self) -> tuple[str, int, float, bool] | None:
        """(holder, epoch, seconds since the lease ran out, takeover due) or None."""
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT holder, epoch, {_stale_seconds()}, {_takeover_due()}"
                f" FROM {_TABLE} WHERE name = %(name)s",
                {"name": self.name},
            )
            row = cursor.fetchone()
        if row is None:
            return None
        return str(row[0]), int(row[1]), float(row[2]), bool(row[3])

    def _create(self) -> None:
        """The role's row, with nobody leading and a lease already run out."""
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {_TABLE} (name, holder, epoch, lease_until)"
                f" VALUES (%(name)s, '', 0, {now_sql()}) ON CONFLICT (name) DO NOTHING",
                {"name": self.name},
            )

    def _mine(self) -> dict[str, str | int | float | None]:
        return {"name": self.name, "holder": self.holder, "epoch": self.epoch}

    def _step_down(self) -> None:
        self.epoch, self.valid_until = None, -math.inf
        self.next_check = time.monotonic() + self.check_seconds
        metrics.leading(role=self.name, leads=False)
