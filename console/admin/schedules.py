"""Campaign schedules (pipeline/schedules.py), shown, edited and paused; each slot with what
happened to it and its run. Scoped like every console page."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from console.admin_base import ScopedInline, TenantScopedAdmin
from sampling.dbtime import db_now
from sampling.models import Schedule, ScheduleSlot
from sampling.schedules import ScheduleError, next_slot, parse_cron, set_paused


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
    fields = ("slot_at", "outcome", "run", "reason", "handled_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ("-slot_at",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Schedule)
class ScheduleAdmin(TenantScopedAdmin):
    form = ScheduleForm
    list_display = ("campaign", "cron", "timezone", "missed_policy", "paused", "next_slot_at")
    list_filter = ("paused", "missed_policy")
    list_select_related = ("campaign", "campaign__tenant")
    readonly_fields = ("next_slot_at",)
    inlines = (ScheduleSlotInline,)
    actions = ("pause", "unpause")

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
