"""Campaign schedules (pipeline/schedules.py), shown, edited and paused; each slot with what
happened to it and its run. Scoped like every console page."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString

from console.admin_base import ScopedInline, TenantScopedAdmin
from pipeline.schedules import ScheduleCost, schedule_cost
from sampling.dbtime import db_now
from sampling.models import Schedule, ScheduleSlot
from sampling.schedules import ScheduleError, in_zone, next_slot, parse_cron, set_paused


class ScheduleForm(forms.ModelForm):
    class Meta:
        model = Schedule
        fields = ("campaign", "cron", "timezone", "missed_policy", "paused")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        try:
            cron = parse_cron(cleaned.get("cron") or "")
            self.instance.next_slot_at = next_slot(
                cron, cleaned.get("timezone") or "", after=db_now()
            )
        except ScheduleError as error:
            raise forms.ValidationError(str(error)) from None
        return cleaned


class ScheduleSlotInline(ScopedInline):
    model = ScheduleSlot
    fields = ("slot_time", "outcome", "run", "reason", "handled_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ("-slot_at",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[ScheduleSlot]:
        return super().get_queryset(request).select_related("schedule")

    @admin.display(description="slot", ordering="slot_at")
    def slot_time(self, slot: ScheduleSlot) -> str:
        return in_zone(slot.slot_at, slot.schedule.timezone)


def _cost_html(cost: ScheduleCost) -> SafeString:
    if cost.per_slot is None:
        return format_html('<span class="geo-cost" id="schedule-cost">{}</span>', cost)
    return format_html(
        '<span class="geo-cost" id="schedule-cost"><strong>{}</strong> per slot; '
        "<strong>{}</strong> per day ({} slots in the next 24 hours); "
        "<strong>{}</strong> per 30 days ({} slots).</span>"
        '<div class="help">The estimated maximum each run holds at launch, from price list '
        "{}; a run is charged only for the answers it collects.</div>",
        cost.per_slot,
        cost.per_day,
        cost.slots_per_day,
        cost.per_month,
        cost.slots_per_month,
        cost.price_version,
    )


@admin.register(Schedule)
class ScheduleAdmin(TenantScopedAdmin):
    form = ScheduleForm
    list_display = ("campaign", "cron", "timezone", "missed_policy", "paused", "next_slot")
    list_filter = ("paused", "missed_policy")
    list_select_related = ("campaign", "campaign__tenant")
    readonly_fields = ("next_slot", "expected_cost")
    inlines = (ScheduleSlotInline,)
    actions = ("pause", "unpause")

    @admin.display(description="next slot", ordering="next_slot_at")
    def next_slot(self, schedule: Schedule) -> str:
        return in_zone(schedule.next_slot_at, schedule.timezone)

    @admin.display(description="expected cost")
    def expected_cost(self, schedule: Schedule) -> SafeString | str:
        if schedule.pk is None:
            return "Shown once the schedule is saved (its campaign's plan at the price list)."
        return _cost_html(self._cost(schedule))

    def _cost(self, schedule: Schedule) -> ScheduleCost:
        return schedule_cost(
            campaign=schedule.campaign, cron=schedule.cron, timezone=schedule.timezone, now=db_now()
        )

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        cost = self._cost(obj)
        level = messages.INFO if cost.per_slot is not None else messages.WARNING
        self.message_user(request, f"Expected cost of {obj.campaign}: {cost}", level)

    @admin.action(description="Pause the selected schedules", permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._set_paused(request, queryset, paused=True)

    @admin.action(description="Unpause (from the next slot on)", permissions=["change"])
    def unpause(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._set_paused(request, queryset, paused=False)

    def _set_paused(
        self, request: HttpRequest, queryset: QuerySet[Schedule], *, paused: bool
    ) -> None:
        now = db_now()
        for schedule in queryset:
            set_paused(schedule=schedule, paused=paused, now=now)
        verb = "paused" if paused else "unpaused"
        self.message_user(request, f"{queryset.count()} schedule(s) {verb}", messages.SUCCESS)
