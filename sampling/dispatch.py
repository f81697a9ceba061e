"""The dispatcher: relays the outbox, recovers expired leases, and claims due work with
admission control, then publishes one message per claim (ids only) to the right queue.

Publishing happens after the claim commits. If it fails, or the process dies first, the
lease expires and the sample becomes claimable again: nothing is lost, and the fencing token
keeps a late duplicate from writing.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

from django.conf import settings
from django.db.models.functions import Now

from .leases import Claim, claim_ready, requeue_expired_leases
from .models import OutboxMessage, QueueState, Sample, Step, Tenant

log = logging.getLogger(__name__)


def queue_for(*, step: str, platform: str) -> str:
    """One queue per platform for upstream calls, so a slow platform only slows itself;
    evidence and analysis have their own queues."""
    if step == Step.EVIDENCE:
        return "evidence"
    if step == Step.ANALYZE:
        return "analysis"
    return f"platform.{platform}"


@dataclass
class DispatchReport:
    relayed: int = 0
    requeued: int = 0
    published: Counter[str] = field(default_factory=Counter)

    @property
    def claimed(self) -> int:
        return sum(self.published.values())


def relay_outbox(*, limit: int = 500) -> int:
    """Publish unsent outbox rows, then mark them sent. A crash in between publishes again
    (consumers are idempotent); a row is never marked sent before it was published."""
    from geo_collect.celery import app

    sent = 0
    for message in OutboxMessage.objects.filter(sent_at=None).order_by("id")[:limit]:
        try:
            app.send_task(message.task, kwargs=message.payload, queue=message.queue)
        except Exception as exc:  # broker down: keep the row, try again next tick
            OutboxMessage.objects.filter(pk=message.pk).update(
                publish_attempts=message.publish_attempts + 1, last_error=str(exc)[:500]
            )
            log.warning("outbox publish failed id=%s: %s", message.pk, exc)
            break
        sent += OutboxMessage.objects.filter(pk=message.pk, sent_at=None).update(sent_at=Now())
    return sent


def _ready_platforms() -> list[str]:
    return list(
        Sample.objects.filter(queue_state=QueueState.READY, due_at__lte=Now())
        .values_list("platform", flat=True)
        .distinct()
    )


def _in_flight(platform: str) -> int:
    return Sample.objects.filter(queue_state=QueueState.LEASED, platform=platform).count()


def _tenant_shares(platform: str, free: int) -> dict[int, int]:
    """Split free slots evenly between tenants with due work, skipping tenants at their
    concurrency cap, so one large tenant cannot take every worker."""
    ready = Sample.objects.filter(
        queue_state=QueueState.READY, platform=platform, due_at__lte=Now()
    )
    tenant_ids = sorted(set(ready.values_list("tenant_id", flat=True)))
    if not tenant_ids:
        return {}
    caps = dict(Tenant.objects.filter(pk__in=tenant_ids).values_list("pk", "max_concurrency"))
    busy = Counter(
        Sample.objects.filter(queue_state=QueueState.LEASED, tenant_id__in=tenant_ids).values_list(
            "tenant_id", flat=True
        )
    )
    open_tenants = [t for t in tenant_ids if busy[t] < caps.get(t, 0)]
    if not open_tenants:
        return {}
    share, extra = divmod(free, len(open_tenants))
    shares = {}
    for i, tenant_id in enumerate(open_tenants):
        room = caps[tenant_id] - busy[tenant_id]
        shares[tenant_id] = min(room, share + (1 if i < extra else 0))
    return {t: n for t, n in shares.items() if n > 0}


def _claim_for_platform(platform: str, *, owner: str, lease: int) -> list[Claim]:
    free = settings.GEO_PLATFORM_CONCURRENCY - _in_flight(platform)
    if free <= 0:
        return []
    claims: list[Claim] = []
    for tenant_id, share in _tenant_shares(platform, free).items():
        claims += claim_ready(
            platform=platform, limit=share, owner=owner, lease_seconds=lease, only_tenant=tenant_id
        )
    return claims


def _publish(claims: list[Claim], report: DispatchReport) -> None:
    from .tasks import execute_step

    for claim in claims:
        queue = queue_for(step=claim.step, platform=claim.platform)
        try:
            execute_step.apply_async(args=(claim.sample_id, claim.token), queue=queue)
        except Exception as exc:  # the lease will expire and the sample will be claimed again
            log.warning("publish failed sample=%s: %s", claim.sample_id, exc)
            continue
        report.published[queue] += 1


def dispatch_once(*, owner: str = "dispatcher") -> DispatchReport:
    report = DispatchReport()
    report.relayed = relay_outbox()
    report.requeued = requeue_expired_leases()
    lease = settings.GEO_LEASE_SECONDS
    for platform in _ready_platforms():
        _publish(_claim_for_platform(platform, owner=owner, lease=lease), report)
    return report
