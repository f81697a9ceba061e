"""What upstream tasks cost us: the provider's reported cost per task and adjustments."""

from __future__ import annotations

import logging

from django.conf import settings

from billing.models import (
    EntryKind,
    JournalEntry,
)
from evidence.models import Capture
from sampling.models import Run

from .accounts import upstream_cost_account, upstream_payable_account
from .errors import BillingError, IdempotencyConflict, check_currency
from .posting import post_entry
from .prices import DEFAULT_CURRENCY

log = logging.getLogger(__name__)


def record_upstream_cost(*, capture_id: int) -> JournalEntry | None:
    """Book the provider's reported cost of one upstream task (one attempt), once per task."""
    capture = Capture.objects.select_related("sample", "sample__run", "sample__tenant").get(
        pk=capture_id
    )
    if not capture.upstream_cost:
        return None
    sample = capture.sample
    currency = check_currency(
        capture.upstream_cost_currency
        or getattr(settings, "GEO_BILLING_UPSTREAM_CURRENCY", DEFAULT_CURRENCY)
    )
    upstream_id = capture.upstream_id or sample.upstream_id
    key = (
        f"upstream-cost:{sample.platform}:{upstream_id}"
        if upstream_id
        else f"upstream-cost:capture:{capture.pk}"
    )
    amount = int(capture.upstream_cost)
    try:
        return post_entry(
            idempotency_key=key,
            kind=EntryKind.UPSTREAM_COST,
            legs=[
                (upstream_payable_account(sample.platform, currency), -amount),
                (upstream_cost_account(sample.platform, currency), amount),
            ],
            tenant=sample.tenant,
            run=sample.run,
            sample_id=sample.pk,
            platform=sample.platform,
            upstream_id=upstream_id,
        )
    except IdempotencyConflict as conflict:
        # The same upstream task reported twice with different costs: the first booking
        # stands; reconciliation against the provider's statement settles the difference.
        log.warning("upstream cost conflict for %s: %s", key, conflict)
        return None


def adjust_upstream_cost(
    *,
    platform: str,
    upstream_id: str,
    currency: str,
    amount: int,
    idempotency_key: str,
    run: Run | None = None,
    sample_id: int | None = None,
    memo: str = "",
) -> JournalEntry:
    """An explicit adjustment of what an upstream task cost us (positive: it cost more)."""
    currency = check_currency(currency)
    if isinstance(amount, bool) or not isinstance(amount, int) or amount == 0:
        raise BillingError(f"an adjustment is a non-zero integer, got {amount!r}")
    return post_entry(
        idempotency_key=idempotency_key,
        kind=EntryKind.ADJUSTMENT,
        legs=[
            (upstream_payable_account(platform, currency), -amount),
            (upstream_cost_account(platform, currency), amount),
        ],
        tenant=run.tenant if run else None,
        run=run,
        sample_id=sample_id,
        platform=platform,
        upstream_id=upstream_id,
        memo=memo,
    )
