"""Holding again what was released, when a resume asks a sample again (pipeline/resume.py).

A released sample's share went back to the tenant's available balance; asking it again costs
the same share, so it is held again from the available balance before the sample is re-opened
(a `rehold` entry). A sample never settled is still held and needs nothing. A charged sample
is never asked again (it was valid and completed), and the settlement constraints charge a
sample at most once in any case.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from uuid import UUID

from django.db.models import F

from sampling.locking import Level, locked
from sampling.models import Run
from sampling.snapshots import Quote

from .models import Account, EntryKind, JournalEntry, SampleSettlement, SettlementReason
from .services import (
    BillingError,
    InsufficientBalance,
    InsufficientFunds,
    available_account,
    hold_account,
    post_entry,
)


def released_shares(*, run_id: UUID | str, sample_ids: Collection[int]) -> dict[int, int]:
    """sample id -> the share released in its current round, for those of `sample_ids` whose
    current round ended in a release."""
    rows = SampleSettlement.objects.filter(
        run_id=run_id, sample_id__in=sample_ids, round=F("sample__resumes")
    ).exclude(reason=SettlementReason.COMPLETED)
    return {
        sample_id: released for sample_id, released in rows.values_list("sample_id", "released")
    }


def rehold_released(
    *, run: Run, sample_ids: Collection[int], resume_no: int
) -> JournalEntry | None:
    """Hold again the released shares of `sample_ids`, in the caller's transaction (which
    holds the run's lock; the hold account is locked here: HOLD_ACCOUNT, sampling/locking.py).
    Raises InsufficientFunds when the tenant's available balance cannot cover them."""
    shares = released_shares(run_id=run.pk, sample_ids=sample_ids)
    total = sum(shares.values())
    if total == 0:
        return None
    quote = Quote.of(run)
    if quote is None:
        raise BillingError(f"run {run.pk} has no quote to hold its released shares by")
    currency = quote.currency
    hold = hold_account(run, currency)
    locked(Account.objects.filter(pk=hold.pk), level=Level.HOLD_ACCOUNT).first()
    digest = hashlib.sha256(",".join(map(str, sorted(shares))).encode()).hexdigest()[:24]
    available = available_account(run.tenant, currency)
    try:
        return post_entry(
            idempotency_key=f"rehold:run:{run.pk}:{resume_no}:{digest}",
            kind=EntryKind.REHOLD,
            legs=[(available, -total), (hold, total)],
            tenant=run.tenant,
            run=run,
            memo=f"resume {resume_no}: {len(shares)} released sample(s) held again",
        )
    except InsufficientBalance as short:
        raise InsufficientFunds(
            tenant=run.tenant.slug, available=short.balance, required=total, currency=currency
        ) from None
