"""A schedule shows what it will spend before it spends it: the expected cost per slot, per
day and per 30 days from the current price list (the preview's quote), and its slot times in
its own time zone (issue 29, finding 8)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.urls import reverse

from console.widgets import money
from pipeline.preview import quote_for_spec
from pipeline.schedules import launch_due_slots, schedule_cost
from sampling.models import Campaign, Run, Schedule
from sampling.schedules import parse_cron, save_schedule, slot_count, slots_between
from sampling.services import campaign_as_spec, save_campaign
from tests.conftest import make_campaign_data, spec_with_tenant
from tests.pipeline.test_schedules import TARGET

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 1, 1, 0, 0, tzinfo=UTC)


def _campaign() -> Campaign:
    data = make_campaign_data(questions=2, targets=[TARGET], repeats=2)
    return save_campaign(spec=spec_with_tenant(data, funded=True))


@pytest.mark.parametrize(
    ("cron", "timezone", "days"),
    [
        ("*/2 * * * *", "UTC", 1),
        ("0 9 * * mon-fri", "Asia/Shanghai", 30),
        ("30 1 * * *", "America/New_York", 30),  # crosses no DST in January
        ("15 */6 1,15 * *", "Europe/Berlin", 30),
    ],
)
def test_slot_count_agrees_with_the_slots_one_by_one(cron: str, timezone: str, days: int) -> None:
    parsed = parse_cron(cron)
    start = NOW + timedelta(hours=5, minutes=7)  # partial first and last days
    end = start + timedelta(days=days)

    listed = [s for s in slots_between(parsed, timezone, start=start, end=end) if s > start]

    assert slot_count(parsed, timezone, start=start, days=days) == len(listed) > 0


def test_the_expected_cost_is_the_previews_quote_times_the_slots() -> None:
    campaign = _campaign()
    quote = quote_for_spec(campaign_as_spec(campaign=campaign))

    cost = schedule_cost(campaign=campaign, cron="0 */2 * * *", timezone="UTC", now=NOW)

    assert cost.per_slot is not None and cost.per_slot.amount == quote.estimated_max > 0
    assert (cost.slots_per_day, cost.slots_per_month) == (12, 360)
    assert cost.per_day is not None and cost.per_day.amount == 12 * quote.estimated_max
    assert cost.per_month is not None and cost.per_month.amount == 360 * quote.estimated_max


def test_the_schedule_page_shows_the_cost_and_times_in_the_schedules_zone(
    admin_client: Client,
) -> None:
    campaign = _campaign()
    schedule = save_schedule(campaign=campaign, cron="0 9 * * *", timezone="Asia/Shanghai", now=NOW)
    launch_due_slots(now=datetime(2026, 1, 1, 1, 0, 10, tzinfo=UTC))  # 09:00 in Shanghai
    assert Run.objects.filter(campaign=campaign).count() == 1
    per_slot = quote_for_spec(campaign_as_spec(campaign=campaign)).estimated_max

    page = admin_client.get(reverse("admin:sampling_schedule_change", args=[schedule.pk]))
    text = page.content.decode()

    assert page.status_code == 200
    assert f"<strong>{money(per_slot, 'USD')}</strong> per slot" in text
    assert f"<strong>{money(30 * per_slot, 'USD')}</strong> per 30 days (30 slots)" in text
    assert "2026-01-01 09:00 Asia/Shanghai (01:00 UTC)" in text  # the slot that launched
    schedule.refresh_from_db()
    listed = admin_client.get(reverse("admin:sampling_schedule_changelist")).content.decode()
    assert "2026-01-02 09:00 Asia/Shanghai (01:00 UTC)" in listed  # the next slot


def test_saving_a_schedule_says_what_it_will_spend(admin_client: Client) -> None:
    campaign = _campaign()
    data = {
        "campaign": campaign.pk,
        "cron": "*/2 * * * *",
        "timezone": "UTC",
        "missed_policy": "skip",
        "slots-TOTAL_FORMS": 0,
        "slots-INITIAL_FORMS": 0,
    }

    response = admin_client.post(reverse("admin:sampling_schedule_add"), data, follow=True)

    assert Schedule.objects.filter(campaign=campaign).exists(), response.content.decode()[:3000]
    shown = [str(m) for m in response.context["messages"]]
    assert any("per slot" in m and "720 slots in the next 24 hours" in m for m in shown), shown
