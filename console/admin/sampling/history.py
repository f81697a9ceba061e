"""Execution history: attempts, refused stale writes, the outbox. Read-only."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from console.admin_base import HistoryAdmin
from sampling.models import Attempt, OutboxMessage, StaleWrite


@admin.register(Attempt)
class AttemptAdmin(HistoryAdmin):
    list_display = (
        "id",
        "sample",
        "attempt_no",
        "status",
        "error_class",
        "status_code",
        "upstream_id",
        "egress",
        "started_at",
        "finished_at",
    )
    list_filter = ("status",)
    list_select_related = ("sample",)
    ordering = ("-id",)


@admin.register(StaleWrite)
class StaleWriteAdmin(HistoryAdmin):
    list_display = (
        "id",
        "sample",
        "operation",
        "presented_token",
        "current_token",
        "worker",
        "created_at",
    )
    list_select_related = ("sample",)
    ordering = ("-id",)


class OutboxSentFilter(admin.SimpleListFilter):
    title = "sent"
    parameter_name = "sent"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("no", "Waiting"), ("yes", "Sent")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "no":
            return queryset.filter(sent_at__isnull=True)
        if self.value() == "yes":
            return queryset.filter(sent_at__isnull=False)
        return queryset


@admin.register(OutboxMessage)
class OutboxMessageAdmin(HistoryAdmin):
    """Platform plumbing, across tenants: superusers only (console.scope)."""

    list_display = (
        "id",
        "task",
        "queue",
        "dedupe_key",
        "created_at",
        "sent_at",
        "publish_attempts",
        "last_error_short",
    )
    list_filter = (OutboxSentFilter,)
    ordering = ("-id",)

    @admin.display(description="last error")
    def last_error_short(self, message: OutboxMessage) -> str:
        return message.last_error[:80]
