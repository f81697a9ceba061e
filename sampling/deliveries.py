"""Sending something out after a commit, one attempt at a time: a webhook (api/webhooks.py),
an alert's email, Slack post or digest (alerts/delivery.py).

A delivery row (`state`, `attempts`, `log`, `delivered_at`, `next_attempt_at`, `created_at`) is
written with its outbox row in the transaction that decided to send; the outbox task makes one
attempt with no transaction open and records it here, by a conditional update on the attempt
number (a duplicate message records nothing twice). A failure is retried with exponential
backoff until the maximum, then the delivery is failed; a delivery whose message was lost is
sent again by `sweep_stuck`, run by the dispatcher's sweeps (pipeline/sweeps.py).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db import models, transaction
from django.db.models import Q
from django.db.models.functions import Coalesce, Now

from .services import complete_outbox

LOG_KEPT = 20  # the attempts a delivery's log keeps, latest last
MAX_BACKOFF_SECONDS = 3600


class DeliveryState(models.TextChoices):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"  # retries exhausted


def backoff_seconds(attempts: int, *, base: float) -> float:
    """The wait after the `attempts`-th failure: `base`, doubling, at most an hour."""
    return float(min(base * 2 ** max(attempts - 1, 0), MAX_BACKOFF_SECONDS))


def record_attempt(
    delivery: Any,
    *,
    ok: bool,
    entry: dict[str, Any],
    max_attempts: int,
    backoff_base: float,
    outbox_id: int | None,
) -> tuple[bool, str, float | None]:
    """Record the attempt that followed `delivery` as it was read: (recorded, the new state,
    the delay before the next attempt or None when done). The message (`outbox_id`) is
    completed in the same transaction: recorded here or by another worker, it is done."""
    attempts = delivery.attempts + 1
    exhausted = attempts >= max_attempts
    state = (
        DeliveryState.DELIVERED
        if ok
        else DeliveryState.FAILED
        if exhausted
        else DeliveryState.PENDING
    )
    delay = None if ok or exhausted else backoff_seconds(attempts, base=backoff_base)
    with transaction.atomic():
        updated = (
            type(delivery)
            .objects.filter(pk=delivery.pk, attempts=delivery.attempts, state=DeliveryState.PENDING)
            .update(
                attempts=attempts,
                state=state,
                log=[*delivery.log, entry][-LOG_KEPT:],
                delivered_at=Now() if ok else None,
                # When the retry is due: the sweep sends again a delivery left far past it.
                next_attempt_at=None if delay is None else Now() + timedelta(seconds=delay),
            )
        )
        complete_outbox(outbox_id=outbox_id)
    return updated == 1, state, delay


def sweep_stuck(
    model: type[models.Model],
    *,
    grace_seconds: float,
    limit: int,
    send_again: Callable[[int, int], None],
) -> int:
    """Send again (`send_again(pk, attempts)`, which writes the outbox row) the pending
    deliveries of `model` whose message was lost: never attempted, or their retry due, for
    longer than `grace_seconds`. Each is claimed by a conditional update that moves its due
    time on, so the next sweep leaves it alone for as long again; a duplicate message is
    harmless (`record_attempt` records one attempt per attempt number)."""
    grace = timedelta(seconds=grace_seconds)
    manager: Any = model._default_manager
    stuck = (
        manager.annotate(due=Coalesce("next_attempt_at", "created_at"))
        .filter(state=DeliveryState.PENDING, due__lt=Now() - grace)
        .order_by("id")
        .values_list("pk", "attempts", "next_attempt_at")[:limit]
    )
    resent = 0
    for pk, attempts, next_attempt_at in stuck:
        with transaction.atomic():
            claimed = manager.filter(
                Q(next_attempt_at=next_attempt_at)
                if next_attempt_at is not None
                else Q(next_attempt_at=None),
                pk=pk,
                state=DeliveryState.PENDING,
                attempts=attempts,
            ).update(next_attempt_at=Now() + grace)
            if claimed == 1:
                send_again(pk, attempts)
                resent += 1
    return resent
