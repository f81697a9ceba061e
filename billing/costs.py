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

from .models import Account, EntryKind, PendingAttemptCost
from .services import (
    UntrackedEntry,
    post_untracked_entries,
    upstream_cost_account,
    upstream_payable_account,
)

log = logging.getLogger(__name__)

PER_TOKENS = 1_000_000
_BOOK_CHUNK = 5000  # attempts booked per transaction at a run's end


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


def _cost_key(attempt_id: int) -> str:
    return f"upstream-cost:attempt:{attempt_id}"


def _memo(attempt_no: int, model: str, input_tokens: int | None, output_tokens: int | None) -> str:
    return f"attempt {attempt_no} ({model}): {input_tokens} in + {output_tokens} out tokens"


def book_attempt_costs(attempt_ids: list[int]) -> int:
    """Book the costs of many attempts, one entry per attempt (keyed by it), in one
    transaction (`post_untracked_entries`): one read of the attempts, their accounts once per
    platform and currency, one chain lock. Idempotent: an attempt already booked is replayed,
    not booked again. Returns the costed attempts whose entry is in the ledger (booked now or
    before)."""
    rows = (
        Attempt.objects.filter(pk__in=attempt_ids, cost__gt=0)
        .order_by("pk")
        .values_list(
            "pk", "attempt_no", "model", "input_tokens", "output_tokens", "cost",
            "cost_currency", "upstream_id", "sample_id", "sample__platform",
            "sample__tenant_id", "sample__run_id",
        )
    )  # fmt: skip
    accounts: dict[tuple[str, str], tuple[Account, Account]] = {}
    entries: list[UntrackedEntry] = []
    for (pk, attempt_no, model, tokens_in, tokens_out, cost, currency, upstream_id, sample_id,
         platform, tenant_id, run_id) in rows:  # fmt: skip
        amount = int(cost or 0)  # cost__gt=0: never None here
        pair = accounts.get((platform, currency))
        if pair is None:
            pair = (
                upstream_payable_account(platform, currency),
                upstream_cost_account(platform, currency),
            )
            accounts[(platform, currency)] = pair
        entries.append(
            UntrackedEntry(
                idempotency_key=_cost_key(pk),
                kind=EntryKind.UPSTREAM_COST,
                legs=[(pair[0], -amount), (pair[1], amount)],
                tenant_id=tenant_id,
                run_id=run_id,
                sample_id=sample_id,
                platform=platform,
                upstream_id=upstream_id,
                memo=_memo(attempt_no, model, tokens_in, tokens_out),
            )
        )
    return post_untracked_entries(entries)


def queue_attempt_cost(*, run_id: UUID | str, attempt_id: int) -> None:
    """Book the attempt's cost later (`book_pending_attempt_costs`, each dispatcher tick): the
    worker writes one row instead of a ledger entry, which takes the ledger's chain lock."""
    # A plain INSERT (sampling/plainsql.py): once per priced attempt, in its fenced write.
    insert_rows([pending_attempt_cost(run_id=run_id, attempt_id=attempt_id)], ignore_conflicts=True)


def pending_attempt_cost(*, run_id: UUID | str, attempt_id: int) -> PendingAttemptCost:
    """The queue row of `queue_attempt_cost`, not yet written (a fenced write that writes it
    with others: skip it on conflict, the attempt's cost is queued once)."""
    return PendingAttemptCost(run_id=run_id, attempt_id=attempt_id)


def book_pending_attempt_costs(*, limit: int = 5000) -> int:
    """Book the queued attempt costs, one entry per attempt in one transaction, and forget
    them. Idempotent: a
    cost already booked (the run's end books them all) is replayed, not booked again."""
    queued = list(PendingAttemptCost.objects.order_by("id").values_list("id", "attempt_id")[:limit])
    if not queued:
        return 0
    booked = book_attempt_costs([attempt_id for _, attempt_id in queued])
    PendingAttemptCost.objects.filter(pk__in=[pk for pk, _ in queued]).delete()
    return booked


def book_run_attempt_costs(*, run_id: UUID | str) -> int:
    """Safety net when a run ends: book every costed attempt of the run not yet booked (a
    worker that died between recording the attempt and booking it, or one still queued).
    Idempotent."""
    attempts = list(
        Attempt.objects.filter(sample__run_id=run_id, cost__gt=0).values_list("pk", flat=True)
    )
    booked = sum(
        book_attempt_costs(attempts[start : start + _BOOK_CHUNK])
        for start in range(0, len(attempts), _BOOK_CHUNK)
    )
    PendingAttemptCost.objects.filter(run_id=run_id).delete()
    return booked
