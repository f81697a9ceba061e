"""Launching the runs of scheduled campaigns, slot by slot (sampling/schedules.py has the cron
math and the schedule's configuration).

The dispatcher calls `launch_due_slots` on every tick with its clock. Each due slot launches a
new run (its own run id) from the campaign's current config and holds its quote, like any
launch (pipeline/launch.py). The slot's record and its run are written in one transaction, and
slots are unique per campaign and time, so a slot never launches twice, however many
dispatchers run or restart. A slot older than the grace period when it is handled was missed
(the dispatcher was down): under `skip` it is recorded as skipped; under `catch_up_one` the
latest missed slot launches once, late, and older ones are skipped.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models.functions import Now

from billing.services import BillingError
from sampling.dbtime import db_now
from sampling.leases import NO_FENCE, Fence, fence_holds
from sampling.locking import Level, locked
from sampling.models import Campaign, MissedSlotPolicy, Schedule, ScheduleSlot, SlotOutcome
from sampling.planning import PlanError
from sampling.schedules import next_slot, parse_cron, slot_count, slots_between
from sampling.services import campaign_as_spec

from .launch import fetch_provider_quotes, launch_run
from .preview import Money, quote_for_spec

log = logging.getLogger(__name__)

MAX_SLOTS_RECORDED = 1000  # a long outage of a per-minute schedule: the latest ones
MONTH_DAYS = 30


@dataclass(frozen=True)
class ScheduleCost:
    """What a schedule is expected to spend at the current price list: each slot launches a
    run that holds its quote's estimated maximum (the plan preview's quote, `quote_for_spec`),
    so this is the most a slot, a day and a month of slots can cost. `problem` says why there
    is no figure (the campaign cannot be planned, no price applies)."""

    per_slot: Money | None
    slots_per_day: int
    slots_per_month: int
    price_version: str = ""
    problem: str = ""

    @property
    def per_day(self) -> Money | None:
        return self._times(self.slots_per_day)

    @property
    def per_month(self) -> Money | None:
        return self._times(self.slots_per_month)

    def _times(self, slots: int) -> Money | None:
        if self.per_slot is None:
            return None
        return Money(self.per_slot.amount * slots, self.per_slot.currency)

    def __str__(self) -> str:
        counts = (
            f"{self.slots_per_day} slot(s) in the next 24 hours, "
            f"{self.slots_per_month} in the next {MONTH_DAYS} days"
        )
        if self.per_slot is None:
            return f"No price: {self.problem} ({counts})"
        return (
            f"{self.per_slot} per slot (estimated maximum, price list {self.price_version}); "
            f"{self.per_day} per day ({self.slots_per_day} slots in the next 24 hours); "
            f"{self.per_month} per {MONTH_DAYS} days ({self.slots_per_month} slots)"
        )


def schedule_cost(*, campaign: Campaign, cron: str, timezone: str, now: datetime) -> ScheduleCost:
    """The expected cost of running `cron` in `timezone` for `campaign` from `now` on.
    Raises ScheduleError for a cron or timezone that is not one."""
    parsed = parse_cron(cron)
    per_day = slot_count(parsed, timezone, start=now, days=1)
    per_month = slot_count(parsed, timezone, start=now, days=MONTH_DAYS)
    try:
        quote = quote_for_spec(campaign_as_spec(campaign=campaign))
    except PlanError as error:
        return ScheduleCost(None, per_day, per_month, problem="; ".join(error.problems))
    except BillingError as error:
        return ScheduleCost(None, per_day, per_month, problem=str(error))
    return ScheduleCost(
        per_slot=Money(quote.estimated_max, quote.currency),
        slots_per_day=per_day,
        slots_per_month=per_month,
        price_version=quote.price_version,
    )


def launch_due_slots(*, now: datetime | None = None, fence: Fence = NO_FENCE) -> list[ScheduleSlot]:
    """Handle every due slot of every active schedule; returns the slots recorded now. Under
    a dispatcher's `fence`, a schedule is handled only while the fence holds."""
    # The database's clock in the statement itself: the dispatcher runs this every tick, and
    # reads the time (one more statement) only when a slot is due.
    due = list(
        Schedule.objects.filter(paused=False, next_slot_at__lte=now or Now()).values_list(
            "pk", flat=True
        )
    )
    if not due:
        return []
    now = now or db_now()
    handled: list[ScheduleSlot] = []
    for schedule_id in due:
        handled += _handle_schedule(schedule_id, now, fence)
    return handled


def _handle_schedule(schedule_id: int, now: datetime, fence: Fence) -> list[ScheduleSlot]:
    with transaction.atomic():
        # select_related: the campaign row is locked with it (level CAMPAIGN, after SCHEDULE).
        schedule = locked(
            Schedule.objects.select_related("campaign").filter(
                pk=schedule_id, paused=False, next_slot_at__lte=now
            ),
            level=Level.SCHEDULE,
            skip_locked=True,
        ).first()
        if schedule is None:  # another dispatcher has it, or it was handled meanwhile
            return []
        if not fence_holds(fence):  # a leader that lost its lease launches nothing
            return []
        cron = parse_cron(schedule.cron)
        slots = slots_between(cron, schedule.timezone, start=schedule.next_slot_at, end=now)
        recorded = [
            _record_slot(schedule, slot_at, outcome)
            for slot_at, outcome in _decide(schedule, slots, now)[-MAX_SLOTS_RECORDED:]
        ]
        schedule.next_slot_at = next_slot(cron, schedule.timezone, after=now)
        schedule.save(update_fields=["next_slot_at"])
    return [slot for slot in recorded if slot is not None]


def _decide(schedule: Schedule, slots: list[datetime], now: datetime) -> list[tuple[datetime, str]]:
    grace = timedelta(seconds=settings.GEO_SCHEDULE_GRACE_SECONDS)
    missed = [slot for slot in slots if now - slot > grace]
    decisions = [(slot, SlotOutcome.SKIPPED.value) for slot in missed]
    if missed and schedule.missed_policy == MissedSlotPolicy.CATCH_UP_ONE:
        decisions[-1] = (missed[-1], SlotOutcome.CAUGHT_UP.value)
    decisions += [(slot, SlotOutcome.LAUNCHED.value) for slot in slots[len(missed) :]]
    return decisions


def _record_slot(schedule: Schedule, slot_at: datetime, outcome: str) -> ScheduleSlot | None:
    """The slot's record, with its run when it launches; None when it was already recorded."""
    quotes = None
    if outcome != SlotOutcome.SKIPPED:  # asked before the transaction, never inside it
        with contextlib.suppress(PlanError):  # the launch below refuses it and says why
            quotes = fetch_provider_quotes(campaign_as_spec(campaign=schedule.campaign))

    try:
        with transaction.atomic():
            run, reason = None, "missed: the dispatcher did not run at this time"
            if outcome != SlotOutcome.SKIPPED:
                try:
                    with transaction.atomic():
                        run = launch_run(campaign=schedule.campaign, provider_quotes=quotes)
                        reason = ""
                except (PlanError, ValueError) as refused:  # BillingError is a ValueError
                    outcome, reason = SlotOutcome.FAILED.value, str(refused)[:200]
                    log.warning("scheduled launch refused %s %s: %s", schedule, slot_at, reason)
            return ScheduleSlot.objects.create(
                schedule=schedule,
                campaign_id=schedule.campaign_id,
                slot_at=slot_at,
                outcome=outcome,
                run=run,
                reason=reason,
            )
    except IntegrityError:
        return None  # recorded already: never launched twice
