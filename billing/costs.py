"""What each attempt cost upstream (retries are not free).

A direct model API bills by tokens: an attempt's usage (read from its raw response,
connectors/usage.py) times its model's price (settings.GEO_MODEL_PRICES, minor units per
million tokens, rounded up per attempt so a cost is never under-recorded) is stored on the
attempt and booked once in the ledger's upstream-cost records, like a collection provider's
reported task cost (billing.services.record_upstream_cost). The run's money summary
(billing.selectors.run_billing) and reconciliation read those records.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from uuid import UUID

from django.conf import settings

from connectors.usage import Usage
from sampling.models import Attempt
from sampling.plainsql import insert_rows

from .models import EntryKind, JournalEntry, PendingAttemptCost
from .services import (
    IdempotencyConflict,
    post_entry,
    upstream_cost_account,
    upstream_payable_account,
)

log = logging.getLogger(__name__)

PER_TOKENS = 1_000_000


@dataclass(frozen=True)
class AttemptCost:
    usage: Usage
    amount: int | None  # minor units; None: the model has no price
    currency: str


def price_usage(*, model: str, usage: Usage) -> AttemptCost:
    price = settings.GEO_MODEL_PRICES.get(model)
    if price is None:
        log.warning("model %r has no price in GEO_MODEL_PRICES; its tokens are not costed", model)
        return AttemptCost(usage=usage, amount=None, currency="")
    millionths = usage.input_tokens * int(price["input"]) + usage.output_tokens * int(
        price["output"]
    )
    return AttemptCost(usage=usage, amount=-(-millionths // PER_TOKENS), currency=price["currency"])


def apply_cost(attempt: Attempt, cost: AttemptCost) -> None:
    """Set the attempt's usage and cost fields; the caller saves the attempt."""
    attempt.input_tokens = cost.usage.input_tokens
    attempt.output_tokens = cost.usage.output_tokens
    attempt.cost = cost.amount
    attempt.cost_currency = cost.currency


def book_attempt_cost(*, attempt_id: int) -> JournalEntry | None:
    """Book one attempt's cost in the ledger, once (keyed by the attempt)."""
    # Without the run's snapshots: the entry needs the run's key, and the frozen snapshot
    # (every question of the campaign) cost more to decode than the rest of the booking.
    attempt = (
        Attempt.objects.select_related("sample__run", "sample__tenant")
        .defer("sample__run__config_snapshot", "sample__run__quote_snapshot")
        .get(pk=attempt_id)
    )
    if not attempt.cost:
        return None
    sample = attempt.sample
    try:
        return post_entry(
            idempotency_key=f"upstream-cost:attempt:{attempt.pk}",
            kind=EntryKind.UPSTREAM_COST,
            legs=[
                (upstream_payable_account(sample.platform, attempt.cost_currency), -attempt.cost),
                (upstream_cost_account(sample.platform, attempt.cost_currency), attempt.cost),
            ],
            tenant=sample.tenant,
            run=sample.run,
            sample_id=sample.pk,
            platform=sample.platform,
            upstream_id=attempt.upstream_id,
            memo=(
                f"attempt {attempt.attempt_no} ({attempt.model}): {attempt.input_tokens} in + "
                f"{attempt.output_tokens} out tokens"
            ),
        )
    except IdempotencyConflict as conflict:
        log.warning("attempt cost conflict for attempt %s: %s", attempt.pk, conflict)
        return None


def queue_attempt_cost(*, run_id: UUID | str, attempt_id: int) -> None:
    """Book the attempt's cost later (`book_pending_attempt_costs`, each dispatcher tick): the
    worker writes one row instead of a ledger entry, which takes the ledger's chain lock."""
    # A plain INSERT (sampling/plainsql.py): once per priced attempt, in its fenced write.
    insert_rows([PendingAttemptCost(run_id=run_id, attempt_id=attempt_id)], ignore_conflicts=True)


def book_pending_attempt_costs(*, limit: int = 5000) -> int:
    """Book the queued attempt costs, one entry per attempt, and forget them. Idempotent: a
    cost already booked (the run's end books them all) is replayed, not booked again."""
    queued = list(PendingAttemptCost.objects.order_by("id").values_list("id", "attempt_id")[:limit])
    booked = sum(book_attempt_cost(attempt_id=attempt_id) is not None for _, attempt_id in queued)
    PendingAttemptCost.objects.filter(pk__in=[pk for pk, _ in queued]).delete()
    return booked


def book_run_attempt_costs(*, run_id: UUID | str) -> int:
    """Safety net when a run ends: book every costed attempt of the run not yet booked (a
    worker that died between recording the attempt and booking it, or one still queued).
    Idempotent."""
    attempts = Attempt.objects.filter(sample__run_id=run_id, cost__gt=0).values_list(
        "pk", flat=True
    )
    booked = sum(book_attempt_cost(attempt_id=pk) is not None for pk in attempts)
    PendingAttemptCost.objects.filter(run_id=run_id).delete()
    return booked
