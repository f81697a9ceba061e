"""A run's money: the hold on launch, a capture per completed sample, the release of the
rest when the run ends or is cancelled. The run's hold account row is the per-run billing
lock: every operation here takes it FOR UPDATE before it decides anything."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.db import transaction
from django.db.models import F, Q

from billing.checkpoints import checkpoint_quietly
from billing.models import (
    Account,
    AccountKind,
    EntryKind,
    JournalEntry,
    PendingCapture,
    PriceComponent,
    SampleSettlement,
    SettlementReason,
)
from billing.selectors import unsettled_samples
from sampling.locking import Level, locked
from sampling.models import CollectionState, Run, Sample, SubmissionState
from sampling.plainsql import insert_rows
from sampling.snapshots import Quote, QuoteLine
from sampling.transitions import PARSE_FAILED

from .accounts import account_code, available_account, hold_account, revenue_account
from .errors import BillingError, InsufficientBalance, InsufficientFunds
from .posting import SettlementLine, post_entry
from .prices import build_quote, target_key

log = logging.getLogger(__name__)

# Pending charges of one run posted per capture entry (its settlement lines are one INSERT).
SETTLE_CHUNK = 5000


def _quote_line(quote: Quote, sample: Sample) -> QuoteLine:
    key = target_key(sample.platform, sample.device, sample.region, sample.mode)
    line = quote.line_for(key)
    if line is None:
        raise BillingError(f"run {sample.run_id} quote has no line for target {key}")
    return line


def _held_quote(run: Run) -> Quote:
    """The quote of a run whose hold account exists (`_lock_run` found it)."""
    quote = Quote.of(run)
    if quote is None:
        raise BillingError(f"run {run.pk} holds money but has no quote")
    return quote


def _lock_run(run_id: UUID | str) -> tuple[Run, Account | None]:
    """Lock the run's hold account (the per-run billing mutex). None when nothing was held."""
    # Without the run's frozen configuration, which billing never reads: it holds the question
    # list (about 100 KB for 1,000 questions), parsed here once a second for each running run.
    run = Run.objects.select_related("tenant").defer("config_snapshot").get(pk=run_id)
    quote = Quote.of(run)
    if quote is None or not quote.holds_money:
        return run, None
    code = account_code(AccountKind.HOLD, quote.currency, run.pk)
    hold = locked(Account.objects.filter(code=code), level=Level.HOLD_ACCOUNT).first()
    return run, hold


def quote_and_reserve(*, run: Run) -> Quote:
    """Quote the run from the active price version, store the quote on the run and hold its
    estimated maximum from the tenant's available balance. Call inside the launch's
    transaction: InsufficientFunds / NoActivePrice roll the launch back."""
    with transaction.atomic():
        # The run's row only (`of`): locking its tenant too would order that row lock before
        # the ledger's chain lock (taken by the hold's entry below), while every entry checks
        # its foreign key to the tenant at commit, after the chain lock: a deadlock with any
        # entry booked for the same tenant meanwhile (seen in bench/collection.py).
        locked_run = locked(
            Run.objects.select_related("tenant"), level=Level.RUN, of=("self",)
        ).get(pk=run.pk)
        quote = Quote.of(locked_run)
        if quote is None:
            quote = build_quote(run=locked_run)
            locked_run.quote_snapshot = quote.to_json()
            Run.objects.filter(pk=run.pk).update(quote_snapshot=locked_run.quote_snapshot)
        run.quote_snapshot = locked_run.quote_snapshot
        amount = quote.estimated_max
        if amount == 0:
            return quote
        currency = quote.currency
        tenant = locked_run.tenant
        available = available_account(tenant, currency)
        try:
            post_entry(
                idempotency_key=f"reserve:run:{run.pk}",
                kind=EntryKind.RESERVE,
                legs=[(available, -amount), (hold_account(locked_run, currency), amount)],
                tenant=tenant,
                run=locked_run,
                memo=f"hold estimated_max of quote {quote.price_version}",
            )
        except InsufficientBalance as short:
            raise InsufficientFunds(
                tenant=tenant.slug, available=short.balance, required=amount, currency=currency
            ) from None
    return quote


def _screenshot_delivered(sample: Sample) -> bool:
    return sample.evidence_state != "failed" and "SCREENSHOT" not in sample.evidence_reason


def _capture_line(quote: Quote, sample: Sample) -> SettlementLine:
    line = _quote_line(quote, sample)
    unit = line.unit_price
    prices = quote.unit_prices[sample.platform]
    charge = prices["base"]
    if line.deep_thinking:
        charge += prices.get(PriceComponent.DEEP_THINKING, 0)
    if line.screenshot and _screenshot_delivered(sample):
        charge += prices.get(PriceComponent.SCREENSHOT, 0)
    return SettlementLine(
        sample_id=sample.pk,
        reason=SettlementReason.COMPLETED,
        reserved=unit,
        captured=charge,
        released=unit - charge,
        round=sample.resumes,
    )


def _capture_legs(
    run: Run, hold: Account, currency: str, lines: list[SettlementLine]
) -> list[tuple[Account, int]]:
    """The hold gives up the samples' reserved shares; revenue takes what they are charged and
    the tenant's available balance the rest."""
    captured = sum(line.captured for line in lines)
    released = sum(line.released for line in lines)
    legs: list[tuple[Account, int]] = [(hold, -(captured + released))]
    if captured:
        legs.append((revenue_account(run.tenant, currency), captured))
    if released:
        legs.append((available_account(run.tenant, currency), released))
    return legs


def _post_capture(run: Run, hold: Account, sample: Sample) -> JournalEntry:
    quote = _held_quote(run)
    line = _capture_line(quote, sample)
    return post_entry(
        idempotency_key=f"capture:sample:{sample.pk}",
        kind=EntryKind.CAPTURE,
        legs=_capture_legs(run, hold, quote.currency, [line]),
        tenant=run.tenant,
        run=run,
        sample_id=sample.pk,
        platform=sample.platform,
        upstream_id=sample.upstream_id,
        settlements=[line],
    )


def _settled_now(settlements: Any) -> Any:
    """Settlements that stop a charge: charged in any round, or settled in the sample's
    current one (a resume may re-open a released sample)."""
    return settlements.filter(
        Q(reason=SettlementReason.COMPLETED) | Q(round=F("sample__resumes"))
    ).select_related("entry")


def queue_capture(*, run_id: UUID | str, sample_id: int) -> None:
    """Charge a valid sample later: one row in the caller's transaction (the verdict's fenced
    write), posted within a dispatcher tick by `post_pending_captures` with the run's other
    pending charges. Repeats queue nothing new."""
    # A plain INSERT (sampling/plainsql.py): once per valid sample, in its fenced write.
    insert_rows([pending_capture(run_id=run_id, sample_id=sample_id)], ignore_conflicts=True)


def pending_capture(*, run_id: UUID | str, sample_id: int) -> PendingCapture:
    """The row of `queue_capture`, not yet written (a fenced write that writes it with others:
    skip it on conflict, a sample is charged once)."""
    return PendingCapture(run_id=run_id, sample_id=sample_id)


def post_pending_captures(*, run_id: UUID | str | None = None, limit: int = SETTLE_CHUNK) -> int:
    """Post the queued charges (of one run, or of all): per run, one capture entry for up to
    `limit` samples, with one settlement line each, under the run's billing lock. A sample
    already settled, or not completed, is skipped with a log line. Returns samples charged."""
    pending = PendingCapture.objects.all()
    if run_id is not None:
        pending = pending.filter(run_id=run_id)
    charged = 0
    for run in pending.values_list("run_id", flat=True).distinct().order_by():
        more = True
        while more:
            count, more = _post_run_captures(run, limit)
            charged += count
    return charged


def _post_run_captures(run_id: UUID | str, limit: int) -> tuple[int, bool]:
    with transaction.atomic():
        run, hold = _lock_run(run_id)
        queued = list(
            PendingCapture.objects.filter(run_id=run_id)
            .order_by("id")
            .values_list("id", "sample_id")[:limit]
        )
        ids = [sample_id for _, sample_id in queued]
        charged: list[Sample] = []
        if hold is None:
            log.warning("capture: run %s holds nothing; %s sample(s) not charged", run_id, len(ids))
        else:
            settled = set(
                _settled_now(SampleSettlement.objects.filter(sample_id__in=ids)).values_list(
                    "sample_id", flat=True
                )
            )
            for sample in Sample.objects.filter(pk__in=ids).order_by("pk"):
                if sample.pk in settled:
                    log.info("capture: sample %s is already settled; not charged", sample.pk)
                elif sample.collection_state != CollectionState.COMPLETED:
                    log.error("capture: sample %s is not completed; not charged", sample.pk)
                else:
                    charged.append(sample)
            if charged:
                _post_captures(run, hold, charged)
        PendingCapture.objects.filter(pk__in=[pk for pk, _ in queued]).delete()
    return len(charged), len(queued) == limit


def _post_captures(run: Run, hold: Account, samples: list[Sample]) -> JournalEntry:
    """One capture entry for many samples of one run: the hold gives up their reserved
    shares, revenue takes what each is charged and the tenant gets the rest back."""
    if len(samples) == 1:  # keyed and tagged by its sample, as a sample's own capture
        return _post_capture(run, hold, samples[0])
    quote = _held_quote(run)
    lines = [_capture_line(quote, sample) for sample in samples]
    return post_entry(
        idempotency_key=f"capture:run:{run.pk}:{_digest(lines)}",
        kind=EntryKind.CAPTURE,
        legs=_capture_legs(run, hold, quote.currency, lines),
        tenant=run.tenant,
        run=run,
        settlements=lines,
        memo=f"capture: {len(lines)} sample(s)",
    )


def _digest(lines: list[SettlementLine]) -> str:
    """Which samples (and rounds) an entry settles, short enough for an idempotency key."""
    return hashlib.sha256(
        ",".join(
            "/".join(map(str, [line.sample_id, *([line.round] if line.round else [])]))
            for line in sorted(lines, key=lambda x: x.sample_id)
        ).encode()
    ).hexdigest()[:24]


@dataclass
class SettleOutcome:
    captured: list[int] = field(default_factory=list)  # sample ids charged now
    released: dict[str, int] = field(default_factory=dict)  # reason -> amount released now
    awaiting: list[int] = field(default_factory=list)  # sample ids still held


def _release(
    run: Run, hold: Account, samples: Iterable[tuple[Sample, str]], *, purpose: str
) -> JournalEntry | None:
    quote = _held_quote(run)
    lines = []
    for sample, reason in samples:
        unit = _quote_line(quote, sample).unit_price
        lines.append(SettlementLine(sample.pk, reason, unit, 0, unit, sample.resumes))
    total = sum(line.released for line in lines)
    if total == 0:
        return None
    return post_entry(
        idempotency_key=f"release:run:{run.pk}:{purpose}:{_digest(lines)}",
        kind=EntryKind.RELEASE,
        legs=[(hold, -total), (available_account(run.tenant, hold.currency), total)],
        tenant=run.tenant,
        run=run,
        settlements=lines,
        memo=f"{purpose}: {len(lines)} sample(s)",
    )


def _unsettled(run: Run) -> Any:
    return unsettled_samples(run)


def settle_run(*, run_id: UUID | str) -> SettleOutcome:
    """After the run finished: charge completed valid samples not yet charged (a missed
    capture), release failed and invalid samples, keep the rest held as awaiting
    reconciliation. Safe to call any number of times, and again once those are resolved.
    Once committed, the chain's head is checkpointed outside the database."""
    outcome = SettleOutcome()
    post_pending_captures(run_id=run_id)  # charges still queued are charges, not misses
    with transaction.atomic():
        run, hold = _lock_run(run_id)
        if hold is None:
            return outcome
        releases: list[tuple[Sample, str]] = []
        for sample in _unsettled(run).order_by("pk"):
            if sample.collection_state == CollectionState.COMPLETED and sample.validity == "valid":
                _post_capture(run, hold, sample)
                outcome.captured.append(sample.pk)
            elif sample.collection_state == CollectionState.FAILED or (
                sample.analysis_reason.startswith(PARSE_FAILED)  # no usable answer: released
            ):
                releases.append((sample, SettlementReason.FAILED))
            elif (
                sample.collection_state == CollectionState.COMPLETED
                and sample.validity == "invalid"
            ):
                releases.append((sample, SettlementReason.INVALID))
            else:
                outcome.awaiting.append(sample.pk)
        entry = _release(run, hold, releases, purpose="settle")
        if entry is not None:
            for line in entry.settlements.all():
                outcome.released[line.reason] = outcome.released.get(line.reason, 0) + line.released
    transaction.on_commit(checkpoint_quietly)  # now, or after the caller's transaction
    return outcome


def release_unaccepted_hold(*, run_id: UUID | str) -> JournalEntry | None:
    """A local cancel: release only samples the upstream never accepted (still planned).
    Accepted, submitting and uncertain samples stay held — the upstream may still run them and
    charge us; they are settled when they end."""
    with transaction.atomic():
        run, hold = _lock_run(run_id)
        if hold is None:
            return None
        planned = list(
            locked(
                _unsettled(run)
                .filter(submission_state=SubmissionState.PLANNED)
                .exclude(collection_state=CollectionState.COMPLETED)
                .order_by("pk"),
                level=Level.SAMPLE,
                of=("self",),
            )
        )
        return _release(
            run, hold, [(s, SettlementReason.CANCELLED) for s in planned], purpose="cancel"
        )
