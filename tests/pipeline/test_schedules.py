"""Schedules with a fake clock: daily 09:00 Asia/Shanghai, three slots, a dispatcher restart
between two of them and one slot missed (no dispatcher running at that time), under each
missed-slot policy; exactly the expected runs exist, and a slot never launches twice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pipeline.dispatch import Dispatcher
from pipeline.schedules import launch_due_slots
from sampling.models import Campaign, Run, Schedule, ScheduleSlot
from sampling.schedules import ScheduleError, parse_cron, save_schedule, set_paused
from sampling.services import save_campaign
from tests.conftest import make_campaign_data, spec_with_tenant

pytestmark = pytest.mark.django_db

TARGET = {"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"}
CREATED = datetime(2026, 1, 1, 0, 0, tzinfo=UTC)
# 09:00 in Shanghai is 01:00 UTC: slots on Jan 1, 2 and 3.
SLOT_1, SLOT_2, SLOT_3 = (datetime(2026, 1, d, 1, 0, tzinfo=UTC) for d in (1, 2, 3))


class FakeClock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def _campaign(repeats: int = 1) -> Campaign:
    data = make_campaign_data(questions=1, targets=[TARGET], repeats=repeats)
    return save_campaign(spec=spec_with_tenant(data, funded=True))


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("skip", [(SLOT_1, "launched"), (SLOT_2, "skipped"), (SLOT_3, "launched")]),
        ("catch_up_one", [(SLOT_1, "launched"), (SLOT_2, "caught_up"), (SLOT_3, "launched")]),
    ],
)
def test_three_slots_a_restart_and_a_missed_slot(
    policy: str, expected: list[tuple[datetime, str]], settings: Any
) -> None:
    settings.GEO_DISPATCH_BOOKKEEPING_SECONDS = 0  # every tick looks for due slots
    campaign = _campaign()
    save_schedule(
        campaign=campaign, cron="0 9 * * *", timezone="Asia/Shanghai", missed_policy=policy,
        now=CREATED,
    )  # fmt: skip
    clock = FakeClock(CREATED)
    first = Dispatcher(owner="dispatcher-1", clock=clock)
    first.tick()
    assert not Run.objects.exists()  # before the first slot

    clock.now = SLOT_1 + timedelta(seconds=20)
    assert first.tick().scheduled == 1
    first.tick()  # the same slot again: nothing

    # The dispatcher stops; the campaign changes; a new dispatcher process starts only after
    # slot 2 has passed by more than the grace period, a few seconds after slot 3.
    Campaign.objects.filter(pk=campaign.pk).update(repeats=3)
    clock.now = SLOT_3 + timedelta(seconds=5)
    restarted = Dispatcher(owner="dispatcher-2", clock=clock)
    restarted.tick()
    restarted.tick()

    slots = list(ScheduleSlot.objects.filter(campaign=campaign).values_list("slot_at", "outcome"))
    assert slots == expected
    runs = Run.objects.filter(campaign=campaign)
    assert runs.count() == sum(outcome != "skipped" for _, outcome in expected)
    assert runs.values("pk").distinct().count() == runs.count()  # each its own run id
    for slot in ScheduleSlot.objects.filter(campaign=campaign).exclude(run=None):
        assert slot.run is not None and slot.run.quote_snapshot  # launched with its quote held
    latest = ScheduleSlot.objects.get(campaign=campaign, slot_at=SLOT_3).run
    assert latest is not None and latest.config_snapshot["repeats"] == 3  # the current config


def test_a_slot_handled_twice_at_once_launches_one_run() -> None:
    campaign = _campaign()
    save_schedule(campaign=campaign, cron="0 9 * * *", timezone="Asia/Shanghai", now=CREATED)
    now = SLOT_1 + timedelta(seconds=1)

    launch_due_slots(now=now)
    # A second dispatcher that read the schedule before the first moved it on: the slot's
    # unique record refuses it.
    Schedule.objects.filter(campaign=campaign).update(next_slot_at=SLOT_1)
    launch_due_slots(now=now)

    assert Run.objects.filter(campaign=campaign).count() == 1
    assert ScheduleSlot.objects.filter(campaign=campaign).count() == 1


def test_a_paused_schedule_launches_nothing_and_resumes_from_the_next_slot() -> None:
    campaign = _campaign()
    schedule = save_schedule(
        campaign=campaign, cron="0 9 * * *", timezone="Asia/Shanghai", now=CREATED
    )
    set_paused(schedule=schedule, paused=True, now=CREATED)

    assert launch_due_slots(now=SLOT_2) == []
    set_paused(schedule=schedule, paused=False, now=SLOT_2 + timedelta(seconds=1))

    assert schedule.next_slot_at == SLOT_3
    assert not Run.objects.filter(campaign=campaign).exists()


@pytest.mark.parametrize(
    ("cron", "timezone", "problem"),
    [
        ("0 9 * *", "UTC", "has 4 fields"),
        ("61 9 * * *", "UTC", "61"),
        ("0 9 * * *", "Mars/Olympus", "unknown timezone"),
    ],
)
def test_a_bad_schedule_is_refused_with_the_problem(cron: str, timezone: str, problem: str) -> None:
    with pytest.raises(ScheduleError, match=problem):
        save_schedule(campaign=_campaign(), cron=cron, timezone=timezone, now=CREATED)


def test_cron_days_match_like_cron() -> None:
    weekdays = parse_cron("0 9 * * mon-fri")
    assert not weekdays.day_matches(datetime(2026, 1, 3, tzinfo=UTC))  # a Saturday
    assert weekdays.day_matches(datetime(2026, 1, 5, tzinfo=UTC))  # a Monday
    either = parse_cron("0 9 1 * sun")  # the 1st, or any Sunday
    assert either.day_matches(datetime(2026, 1, 1, tzinfo=UTC))
    assert either.day_matches(datetime(2026, 1, 4, tzinfo=UTC))
    assert not either.day_matches(datetime(2026, 1, 5, tzinfo=UTC))


def test_the_console_lists_and_pauses_schedules(admin_client: Any) -> None:
    campaign = _campaign()
    schedule = save_schedule(
        campaign=campaign, cron="0 9 * * *", timezone="Asia/Shanghai", now=CREATED
    )

    page = admin_client.get("/admin/sampling/schedule/")
    assert page.status_code == 200 and "Asia/Shanghai" in page.content.decode()
    admin_client.post(
        "/admin/sampling/schedule/", {"action": "pause", "_selected_action": [schedule.pk]}
    )

    schedule.refresh_from_db()
    assert schedule.paused
