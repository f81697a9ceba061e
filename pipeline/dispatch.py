"""The dispatcher: relays the outbox, recovers expired leases, and claims due work with
admission control, then publishes the claims (ids only) to the right queue: one message for
a tick's claims of one queue, up to GEO_STEPS_PER_MESSAGE, each its own step in the worker.

Admission control, per tick:
- per platform and operation: a concurrency cap (leased samples) and a token-bucket rate,
  so a slow or rate-limited platform only ever slows itself;
- upstream calls, evidence (screenshots) and analysis have separate caps and queues, so
  screenshots never take the answer-collection slots;
- per tenant: free slots are split evenly between tenants with due work, and no tenant goes
  past its `max_concurrency`, so one large tenant cannot take every worker;
- inside a tenant: oldest `due_at` first; priority shifts `due_at` at plan time (aging).

Publishing happens after the claim commits. If it fails, or the process dies first, the
lease expires and the sample becomes claimable again: nothing is lost, and the fencing token
keeps a late duplicate from writing.

Circuits (pipeline/circuits.py): a platform whose every egress is unreachable (its circuit
open) has none of its calls claimed, except the half-open probes once its cooldown passed.

Leadership (pipeline/leadership.py): a dispatcher given a `Leadership` renews its leader lease
at the start of every tick and does nothing else unless it leads; its writes (claims, outbox
marks, lease sweeps, schedule launches) carry the lease's fence, so a leader that lost the
lease while it was stopped writes nothing when it wakes up.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models.functions import Now

from billing.checkpoints import checkpoint_if_due
from billing.costs import book_pending_attempt_costs
from billing.services import post_pending_captures
from connectors.platforms import platform_queue
from connectors.registry import get_connector
from connectors.retry import OPERATIONS, RateLimit, RateLimiter
from geo_collect import metrics
from geo_collect.celery import app
from geo_collect.failpoints import failpoint
from pipeline.circuits import CircuitGate
from pipeline.leadership import Leadership
from pipeline.limits import CallBudget
from pipeline.runs import finish_ended_runs
from pipeline.schedules import launch_due_slots
from pipeline.sweeps import run_sweeps
from pipeline.tasks import execute_step, execute_steps, execute_submit_batch
from sampling.dbtime import now_sql
from sampling.leases import NO_FENCE, Claim, Fence, claim_ready, requeue_expired_leases
from sampling.models import OutboxMessage, QueueState, Sample, Step
from sampling.plainsql import columns, from_row
from sampling.plainsql import cursor as plain_cursor
from sampling.services import OUTBOX_ID
from tenancy.models import Tenant

log = logging.getLogger(__name__)

# step -> (operation for rate limits, concurrency group)
_STEP_KIND: dict[str, tuple[str, str]] = {
    Step.SUBMIT: ("submit", "upstream"),
    Step.ARCHIVE: ("archive", "evidence"),  # a kept answer to the evidence store: no upstream
    Step.VERIFY: ("poll", "upstream"),
    Step.POLL: ("poll", "upstream"),
    Step.EVIDENCE: ("screenshot", "evidence"),
    Step.ANALYSE: ("analyse", "analysis"),
}


def queue_for(*, step: str, platform: str) -> str:
    """One queue per platform for upstream calls, so a slow platform only slows itself;
    evidence and analysis have their own queues."""
    group = _STEP_KIND[step][1]
    return platform_queue(platform) if group == "upstream" else group


def _group_cap(group: str) -> int:
    caps = {
        "upstream": settings.GEO_PLATFORM_CONCURRENCY,
        "evidence": settings.GEO_EVIDENCE_CONCURRENCY,
        "analysis": settings.GEO_ANALYSIS_CONCURRENCY,
    }
    return int(caps[group])


@dataclass
class DispatchReport:
    relayed: int = 0
    requeued: int = 0
    scheduled: int = 0  # schedule slots handled (launched, caught up, skipped, refused)
    charged: int = 0  # queued sample charges posted
    published: Counter[str] = field(default_factory=Counter)
    leading: bool = True  # False: a standby, or a leader that lost its lease; nothing was done

    @property
    def claimed(self) -> int:
        return sum(self.published.values())


# Marked sent whether or not its consumer already completed it (a fast consumer can finish
# before this mark): `completed_at` alone says done.
_MARK_SENT = f"""UPDATE {OutboxMessage._meta.db_table} SET sent_at = {{now}}
 WHERE id = %(id)s AND {{fence}}"""


def relay_outbox(
    *,
    limit: int = 500,
    fence: Fence = NO_FENCE,
    may_act: Callable[[], bool] = lambda: True,
    forgotten: bool = True,
) -> int:
    """Publish unsent outbox rows, then mark them sent; and publish again the rows published
    but not completed by their consumer for GEO_OUTBOX_REDELIVER_SECONDS (the broker forgot
    them, or their consumer keeps failing). A crash in between publishes again (consumers are
    idempotent); a row is never marked sent before it was published. Each message carries its
    row's id (`outbox_id`) for the consumer to complete it. Under a `fence` the mark is
    refused once the lease is lost; `may_act` stops publishing as soon as the leader cannot
    be sure it still leads. `forgotten=False` publishes the unsent rows only (the dispatcher
    looks for forgotten ones at its bookkeeping pace: they wait minutes anyway)."""
    sent = 0
    for message in _due_messages(limit, forgotten=forgotten):
        if not may_act():
            break
        failpoint("after_commit_before_publish")
        try:
            app.send_task(
                message.task, kwargs={**message.payload, OUTBOX_ID: message.pk}, queue=message.queue
            )
        except Exception as exc:  # broker down: keep the row, try again next tick
            OutboxMessage.objects.filter(pk=message.pk).update(
                publish_attempts=message.publish_attempts + 1, last_error=str(exc)[:500]
            )
            log.warning("outbox publish failed id=%s: %s", message.pk, exc)
            break
        if message.sent_at is not None:
            log.warning(
                "outbox message id=%s (%s) published again: not completed since %s",
                message.pk,
                message.task,
                message.sent_at.isoformat(),
            )
            metrics.outbox_republished(task=message.task)
        sent += _mark_sent(message.pk, fence)
    return sent


# A plain statement, prepared (sampling/plainsql.py): the dispatcher runs it every tick.
_UNSENT = f"""SELECT {columns(OutboxMessage, "o")} FROM {OutboxMessage._meta.db_table} o
 WHERE o.sent_at IS NULL AND o.completed_at IS NULL ORDER BY o.id LIMIT %s"""


def _due_messages(limit: int, *, forgotten: bool = True) -> list[OutboxMessage]:
    """The unsent rows, oldest first, then (`forgotten`) those published and not completed for
    longer than the redelivery timeout (database time); each through its partial index."""
    with plain_cursor() as cursor:
        cursor.execute(_UNSENT, [limit])
        unsent = [from_row(OutboxMessage, row) for row in cursor.fetchall()]
    if len(unsent) == limit or not forgotten:
        return unsent
    stale = Now() - timedelta(seconds=float(settings.GEO_OUTBOX_REDELIVER_SECONDS))
    stale_rows = OutboxMessage.objects.filter(
        completed_at=None, sent_at__isnull=False, sent_at__lt=stale
    ).order_by("sent_at")[: limit - len(unsent)]
    return unsent + list(stale_rows)


def _mark_sent(message_id: int, fence: Fence) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            _MARK_SENT.format(now=now_sql(), fence=fence.sql), {"id": message_id, **fence.params}
        )
        return cursor.rowcount


@dataclass
class _Load:
    """What is due and what is running, from two grouped queries per tick."""

    due: dict[tuple[str, str], list[int]]  # (platform, step) -> tenants with due work
    leased_by_group: Counter[tuple[str, str]]  # (platform, group) -> leased samples
    leased_by_tenant: Counter[int]
    tenant_caps: dict[int, int]
    tenant_rates: dict[int, float | None] = field(default_factory=dict)


_SAMPLE = Sample._meta.db_table
_READY = f"queue_state = '{QueueState.READY.value}'"
_DUE = f"""SELECT DISTINCT platform, step, tenant_id FROM {_SAMPLE}
 WHERE {_READY} AND due_at <= {{now}}
 ORDER BY platform, step, tenant_id"""
# The same on PostgreSQL, without reading every ready row: from one (platform, step, tenant)
# of the ready index to the next (a skip scan, each hop one index probe), keeping those whose
# earliest due time has come (one more probe each). A backlog of a million ready rows, due or
# not yet, costs what a handful does (docs/decisions.md, "Due work found by skipping from key
# to key").
_DUE_GROUPS = f"""WITH RECURSIVE k AS (
  (SELECT platform, step, tenant_id FROM {_SAMPLE} WHERE {_READY}
    ORDER BY platform, step, tenant_id LIMIT 1)
  UNION ALL
  SELECT n.platform, n.step, n.tenant_id FROM k, LATERAL (
    SELECT platform, step, tenant_id FROM {_SAMPLE}
     WHERE {_READY} AND (platform, step, tenant_id) > (k.platform, k.step, k.tenant_id)
     ORDER BY platform, step, tenant_id LIMIT 1) n)
SELECT platform, step, tenant_id FROM k
 WHERE EXISTS (SELECT 1 FROM {_SAMPLE} s WHERE s.{_READY} AND s.platform = k.platform
                  AND s.step = k.step AND s.tenant_id = k.tenant_id AND s.due_at <= {{now}})
 ORDER BY platform, step, tenant_id"""
_LEASED = f"""SELECT platform, step, tenant_id, count(*) FROM {_SAMPLE}
 WHERE queue_state = '{QueueState.LEASED.value}' GROUP BY platform, step, tenant_id"""


def _load() -> _Load:
    due: dict[tuple[str, str], list[int]] = defaultdict(list)
    # Plain statements: a busy dispatcher runs them many times a second.
    due_sql = _DUE_GROUPS if connection.vendor == "postgresql" else _DUE
    with plain_cursor() as cursor:  # prepared: planned once per connection
        cursor.execute(due_sql.format(now=now_sql()), [])  # [] : now_sql's doubled %
        for platform, step, tenant_id in cursor.fetchall():
            due[(platform, step)].append(tenant_id)
        cursor.execute(_LEASED)
        leased = cursor.fetchall()
    leased_by_group: Counter[tuple[str, str]] = Counter()
    leased_by_tenant: Counter[int] = Counter()
    for platform, step, tenant_id, n in leased:
        leased_by_group[(platform, _STEP_KIND[step][1])] += n
        leased_by_tenant[tenant_id] += n
    tenants = {t for tenants in due.values() for t in tenants}
    caps: dict[int, int] = {}
    rates: dict[int, float | None] = {}
    for pk, cap, rate in Tenant.objects.filter(pk__in=tenants).values_list(
        "pk", "max_concurrency", "max_calls_per_second"
    ):
        caps[pk], rates[pk] = cap, rate
    return _Load(due, leased_by_group, leased_by_tenant, caps, rates)


def _fair_shares(free: int, tenants: list[int], load: _Load) -> dict[int, int]:
    """Split `free` slots evenly between tenants, none past its concurrency cap."""
    room = {t: load.tenant_caps.get(t, 0) - load.leased_by_tenant[t] for t in tenants}
    shares: dict[int, int] = dict.fromkeys(tenants, 0)
    open_tenants = [t for t in tenants if room[t] > 0]
    while free > 0 and open_tenants:
        for tenant_id in list(open_tenants):
            if free == 0:
                break
            shares[tenant_id] += 1
            free -= 1
            if shares[tenant_id] >= room[tenant_id]:
                open_tenants.remove(tenant_id)
    return {t: n for t, n in shares.items() if n > 0}


class Dispatcher:
    """Holds the rate limiters between ticks; one per dispatching process. With a
    `leadership` it dispatches only while it holds the leader lease, and fences its writes
    with it; without one it is the only dispatcher (tests, the in-process bench)."""

    def __init__(
        self,
        *,
        owner: str = "dispatcher",
        clock: Callable[[], datetime] | None = None,
        leadership: Leadership | None = None,
    ) -> None:
        self.owner = owner
        self.clock = clock  # None: database time (a test passes a fake clock for schedules)
        self.leadership = leadership
        self.booked_at = -math.inf  # monotonic time of the last bookkeeping
        self.looked_at = -math.inf  # ... and of the last look for what is due after minutes
        self.calls = CallBudget()  # global and per-tenant, alongside the per-platform limiter
        self.circuits = CircuitGate()  # platforms whose calls are held: unreachable
        self.limiter = RateLimiter(
            limits={
                (platform, op): RateLimit(per_second=rate, burst=max(1.0, rate))
                for platform, ops in settings.GEO_RATE_LIMITS.items()
                for op, rate in ops.items()
            },
            default=RateLimit(
                per_second=settings.GEO_DEFAULT_RATE_LIMIT,
                burst=max(1.0, settings.GEO_DEFAULT_RATE_LIMIT),
            ),
        )

    def tick(self) -> DispatchReport:
        report = DispatchReport()
        if self.leadership is not None and not self.leadership.hold():  # one statement
            report.leading = False
            return report
        fence = self.fence()
        # What is due after minutes is looked for at the bookkeeping pace, not every tick (the
        # first tick always), each look a statement or a transaction of its own: rows
        # published but never completed (due after GEO_OUTBOX_REDELIVER_SECONDS), leases run
        # out (GEO_LEASE_SECONDS) and schedule slots (a minute apart at the finest).
        looking = time.monotonic() - self.looked_at >= settings.GEO_DISPATCH_BOOKKEEPING_SECONDS
        if looking:
            self.looked_at = time.monotonic()
        report.relayed = relay_outbox(fence=fence, may_act=self.may_act, forgotten=looking)
        if looking:
            report.requeued = requeue_expired_leases(fence=fence)
            now = self.clock() if self.clock else None
            report.scheduled = len(launch_due_slots(now=now, fence=fence))
        load = _load()
        self.circuits.begin_tick()
        for (platform, step), tenants in load.due.items():
            if not self.may_act():  # stopped mid-tick long enough to maybe have lost the lease
                return report
            self._claim_and_publish(platform, step, tenants, load, report)
        # After the claims, so freed slots are filled first, and at most every
        # GEO_DISPATCH_BOOKKEEPING_SECONDS (the first tick always). Charges and upstream costs
        # the workers queued: one capture entry per run batch, so no sample waits on its run's
        # and tenant's account rows (docs/decisions.md). Not fenced: each is idempotent and
        # correct whoever runs it (row locks), so a late run by an old leader does no harm.
        due = time.monotonic() - self.booked_at >= settings.GEO_DISPATCH_BOOKKEEPING_SECONDS
        if due and self.may_act():
            self.booked_at = time.monotonic()
            report.charged = post_pending_captures()
            book_pending_attempt_costs()
            finish_ended_runs()
            run_sweeps()  # what upper layers registered (pipeline/sweeps.py)
            checkpoint_if_due()  # the ledger head, signed outside the database (billing)
        return report

    def fence(self) -> Fence:
        return NO_FENCE if self.leadership is None else self.leadership.fence()

    def may_act(self) -> bool:
        return self.leadership is None or self.leadership.may_act()

    def _claim_and_publish(
        self, platform: str, step: str, tenants: list[int], load: _Load, report: DispatchReport
    ) -> None:
        op, group = _STEP_KIND[step]
        free = _group_cap(group) - load.leased_by_group[(platform, group)]
        # An unreachable platform's calls wait together (only its half-open probes go), before
        # any rate token or call budget is spent on them.
        free = self.circuits.take(platform=platform, step=step, wanted=free)
        free = min(free, self._tokens(platform, op, free))
        upstream = group == "upstream"  # calls that reach a platform count against budgets
        if upstream:
            free = self.calls.take_global(free)
        if free <= 0:
            return
        claims: list[Claim] = []
        for tenant_id, share in _fair_shares(free, tenants, load).items():
            if upstream:
                share = self.calls.take_tenant(tenant_id, share, load.tenant_rates.get(tenant_id))
            mine = claim_ready(
                platform=platform,
                steps=(step,),
                limit=share,
                owner=self.owner,
                lease_seconds=settings.GEO_LEASE_SECONDS,
                only_tenant=tenant_id,
                fence=self.fence(),
            )
            if upstream:
                self.calls.give_back_tenant(tenant_id, share - len(mine))
            load.leased_by_tenant[tenant_id] += len(mine)
            claims += mine
        if upstream:
            self.calls.give_back_global(free - len(claims))
        load.leased_by_group[(platform, group)] += len(claims)
        self.circuits.claimed(
            platform=platform, step=step, claims=[(c.sample_id, c.token) for c in claims]
        )
        _publish(claims, report)

    def _tokens(self, platform: str, op: str, wanted: int) -> int:
        if op not in OPERATIONS:  # local work (analysis) has no upstream rate to respect
            return wanted
        granted = 0
        while granted < wanted and self.limiter.try_acquire(platform, op):
            granted += 1
        return granted


@functools.cache
def batch_limit(platform: str) -> int:
    """How many submits of the platform go in one upstream call: the submission limit of a
    platform that accepts batches (the collection provider), else one."""
    capabilities = get_connector(platform).capabilities()
    return capabilities.submission_limit if capabilities.asynchronous else 1


def _publish(claims: list[Claim], report: DispatchReport) -> None:
    """The claims in messages per queue: a batch-accepting platform's submits in batches of its
    submission limit, answered in one upstream call; any other claims in messages of up to
    GEO_STEPS_PER_MESSAGE, each its own step."""
    if claims:
        failpoint("after_commit_before_publish")
    groups: dict[tuple[str, bool], list[Claim]] = defaultdict(list)  # (queue, one call)
    for claim in claims:
        one_call = claim.step == Step.SUBMIT and batch_limit(claim.platform) > 1
        groups[(queue_for(step=claim.step, platform=claim.platform), one_call)].append(claim)
    for (queue, one_call), mine in groups.items():
        size = max(1, batch_limit(mine[0].platform) if one_call else settings.GEO_STEPS_PER_MESSAGE)
        for start in range(0, len(mine), size):
            _publish_chunk(mine[start : start + size], queue, one_call, report)


def _publish_chunk(claims: list[Claim], queue: str, one_call: bool, report: DispatchReport) -> None:
    held = [[claim.sample_id, claim.token] for claim in claims]
    try:
        if one_call:
            execute_submit_batch.apply_async(args=(held,), queue=queue)
        elif len(held) == 1:
            execute_step.apply_async(args=tuple(held[0]), queue=queue)
        else:
            execute_steps.apply_async(args=(held,), queue=queue)
    except Exception as exc:  # the leases will expire and the samples will be claimed again
        log.warning("publish of %s claim(s) on %s failed: %s", len(held), queue, exc)
        return
    report.published[queue] += len(held)


_default: Dispatcher | None = None


def dispatch_once(*, owner: str = "dispatcher") -> DispatchReport:
    """One tick with a process-wide dispatcher (its rate limiters persist between ticks)."""
    global _default
    if _default is None or _default.owner != owner:
        _default = Dispatcher(owner=owner)
    return _default.tick()
