"""Execution history: attempts, refused stale writes, the outbox. Read-only."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Q

from console.admin_base import HistoryAdmin, InternalTableMixin, OptionsFilter
from sampling.models import Attempt, OutboxMessage, StaleWrite


@admin.register(Attempt)
class AttemptAdmin(InternalTableMixin, HistoryAdmin):
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


@admin.register(StaleWrite)
class StaleWriteAdmin(InternalTableMixin, HistoryAdmin):
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


class OutboxSentFilter(OptionsFilter):
    title = "sent"
    options = {
        "no": ("Waiting", Q(sent_at__isnull=True)),
        "yes": ("Sent", Q(sent_at__isnull=False)),
    }


@admin.register(OutboxMessage)
class OutboxMessageAdmin(HistoryAdmin):
    """Platform plumbing, across tenants: superusers only (tenancy.scope)."""

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

    @admin.display(description="last error")
    def last_error_short(self, message: OutboxMessage) -> str:
        return message.last_error[:80]
