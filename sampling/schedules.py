"""Cron schedules of campaigns: parsing, the next slot in a timezone, and the schedule's
configuration writes. Launching a slot's run is pipeline/schedules.py (launch is pipeline's).

A cron expression has five fields: minute hour day-of-month month day-of-week (0 or 7 is
Sunday; names and ranges as in cron, e.g. `0 9 * * mon-fri`). As in cron, when both the day
of the month and the day of the week are restricted, a day matching either one is a slot.
Slots are computed in the schedule's timezone, so "09:00 Asia/Shanghai" stays 09:00 there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from celery.schedules import ParseException, crontab_parser

from .models import Campaign, MissedSlotPolicy, Schedule

MAX_DAYS_AHEAD = 366 * 5  # `0 0 29 2 *` is the sparsest schedule worth allowing


class ScheduleError(ValueError):
    """The schedule cannot be saved; the message names the problem."""


@dataclass(frozen=True)
class Cron:
    expression: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    any_day: bool
    any_weekday: bool

    def day_matches(self, day: datetime) -> bool:
        if day.month not in self.months:
            return False
        by_day = day.day in self.days
        by_weekday = (day.weekday() + 1) % 7 in self.weekdays
        if self.any_day and self.any_weekday:
            return True
        if self.any_day:
            return by_weekday
        if self.any_weekday:
            return by_day
        return by_day or by_weekday


def parse_cron(expression: str) -> Cron:
    fields = expression.split()
    if len(fields) != 5:
        raise ScheduleError(
            f"cron {expression!r} has {len(fields)} fields; expected 5 "
            "(minute hour day-of-month month day-of-week)"
        )
    minute, hour, day, month, weekday = fields
    try:
        weekdays = crontab_parser(7).parse(re.sub(r"\b7\b", "0", weekday))  # 7 is Sunday too
        return Cron(
            expression=" ".join(fields),
            minutes=tuple(sorted(crontab_parser(60).parse(minute))),
            hours=tuple(sorted(crontab_parser(24).parse(hour))),
            days=frozenset(crontab_parser(32, 1).parse(day)),
            months=frozenset(crontab_parser(13, 1).parse(month)),
            weekdays=frozenset(weekdays),
            any_day=day == "*",
            any_weekday=weekday == "*",
        )
    except (ParseException, ValueError) as error:
        raise ScheduleError(f"cron {expression!r}: {error}") from None


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(
            f"unknown timezone {name!r} (an IANA name, e.g. Asia/Shanghai)"
        ) from None


def next_slot(cron: Cron, timezone: str, *, after: datetime) -> datetime:
    """The first slot strictly after `after` (aware), as an aware UTC datetime."""
    tz = zone(timezone)
    local = after.astimezone(tz)
    day = datetime(local.year, local.month, local.day, tzinfo=tz)
    for _ in range(MAX_DAYS_AHEAD):
        if cron.day_matches(day):
            for hour in cron.hours:
                for minute in cron.minutes:
                    slot = day.replace(hour=hour, minute=minute).astimezone(UTC)
                    if slot > after:
                        return slot
        day = (day + timedelta(days=1, hours=2)).replace(hour=0)  # safe across DST changes
    raise ScheduleError(f"cron {cron.expression!r} has no slot in the next {MAX_DAYS_AHEAD} days")


def slots_between(cron: Cron, timezone: str, *, start: datetime, end: datetime) -> list[datetime]:
    """Slots in [start, end], oldest first."""
    slots: list[datetime] = []
    slot = start
    if not _is_slot(cron, timezone, start):
        slot = next_slot(cron, timezone, after=start)
    while slot <= end:
        slots.append(slot)
        slot = next_slot(cron, timezone, after=slot)
    return slots


def slot_count(cron: Cron, timezone: str, *, start: datetime, days: int) -> int:
    """How many slots fall in the `days` days after `start`, counted per local day in the
    schedule's timezone (no walk slot by slot: a per-minute schedule has 43,200 a month). A
    day a DST change shortens or lengthens counts its listed times, as cron would mostly
    fire them."""
    tz = zone(timezone)
    end = start + timedelta(days=days)
    local = start.astimezone(tz)
    day = datetime(local.year, local.month, local.day, tzinfo=tz)
    per_day = len(cron.hours) * len(cron.minutes)
    count = 0
    while day < end:
        if cron.day_matches(day):
            if day >= start and day + timedelta(days=1) <= end:
                count += per_day
            else:  # the window's partial first and last days: their slots one by one
                count += sum(
                    start < day.replace(hour=h, minute=m).astimezone(UTC) <= end
                    for h in cron.hours
                    for m in cron.minutes
                )
        day = (day + timedelta(days=1, hours=2)).replace(hour=0)  # safe across DST changes
    return count


def in_zone(moment: datetime | None, timezone: str) -> str:
    """A slot time as a person reads it: in the schedule's zone, named, with UTC beside it
    when the zone is another one ("2026-12-02 09:00 Asia/Shanghai (01:00 UTC)")."""
    if moment is None:
        return "–"
    try:
        local = moment.astimezone(zone(timezone))
    except ScheduleError:
        return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
    text = f"{local:%Y-%m-%d %H:%M} {timezone}"
    if timezone != "UTC":
        text += f" ({moment.astimezone(UTC):%H:%M} UTC)"
    return text


def _is_slot(cron: Cron, timezone: str, moment: datetime) -> bool:
    return next_slot(cron, timezone, after=moment - timedelta(microseconds=1)) == moment


def save_schedule(
    *,
    campaign: Campaign,
    cron: str,
    timezone: str,
    missed_policy: str = MissedSlotPolicy.SKIP,
    now: datetime,
) -> Schedule:
    """Create or change a campaign's schedule; its first slot is the next one after `now`."""
    parsed = parse_cron(cron)
    if missed_policy not in MissedSlotPolicy.values:
        raise ScheduleError(
            f"missed-slot policy {missed_policy!r} is not one of "
            + ", ".join(MissedSlotPolicy.values)
        )
    schedule, _ = Schedule.objects.update_or_create(
        campaign=campaign,
        defaults={
            "cron": parsed.expression,
            "timezone": timezone,
            "missed_policy": missed_policy,
            "next_slot_at": next_slot(parsed, timezone, after=now),
        },
    )
    return schedule


def set_paused(*, schedule: Schedule, paused: bool, now: datetime) -> Schedule:
    """Pause or unpause. Slots that pass while paused are not missed: unpausing starts from
    the next slot after `now`."""
    schedule.paused = paused
    if not paused:
        schedule.next_slot_at = next_slot(parse_cron(schedule.cron), schedule.timezone, after=now)
    schedule.save(update_fields=["paused", "next_slot_at"])
    return schedule
