"""Finance in the admin: read-only ledger and balances, price lists, statements, and the
reconciliation report (per run and per period) with CSV / XLSX export."""

from __future__ import annotations

from datetime import datetime, time
from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.dateparse import parse_date

from . import exports
from .models import (
    Account,
    JournalEntry,
    Posting,
    Price,
    PriceVersion,
    SampleSettlement,
    UpstreamStatement,
    UpstreamStatementLine,
)
from .reconciliation import STATUSES, reconcile
from .selectors import account_balance
from .services import format_amount


class ReadOnlyAdmin(admin.ModelAdmin):
    """Ledger rows are written by services only and never changed."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):
    """Every shown field is read-only: subclasses name `fields` once."""

    extra = 0
    can_delete = False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [str(name) for name in self.fields or ()]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class PriceInline(admin.TabularInline):
    model = Price
    extra = 3
    can_delete = False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None


@admin.register(PriceVersion)
class PriceVersionAdmin(admin.ModelAdmin):
    """A price change is a new version (added here); existing versions cannot be edited."""

    list_display = ["name", "currency", "effective_from", "created_at"]
    inlines = [PriceInline]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Account)
class AccountAdmin(ReadOnlyAdmin):
    list_display = ["code", "kind", "currency", "tenant", "cached", "derived"]
    list_filter = ["kind", "currency"]
    search_fields = ["code", "tenant__slug"]

    @admin.display(description="cached balance")
    def cached(self, obj: Account) -> str:
        return format_amount(obj.balance, obj.currency) if obj.tracks_balance else "-"

    @admin.display(description="balance (from postings)")
    def derived(self, obj: Account) -> str:
        return format_amount(account_balance(obj), obj.currency)


class PostingInline(ReadOnlyInline):
    model = Posting
    fields = ["account", "amount"]


class SettlementInline(ReadOnlyInline):
    model = SampleSettlement
    fields = ["sample", "reason", "reserved", "captured", "released"]


@admin.register(JournalEntry)
class JournalEntryAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "created_at",
        "kind",
        "tenant",
        "run",
        "sample_id",
        "upstream_id",
        "idempotency_key",
    ]
    list_filter = ["kind", "created_at"]
    search_fields = ["idempotency_key", "upstream_id", "run__id"]
    inlines = [PostingInline, SettlementInline]
    actions = ["export_csv", "export_xlsx"]
    change_list_template = "admin/billing/journalentry/change_list.html"

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.reconciliation_view)
        return [
            path("reconciliation/", view, name="billing_reconciliation"),
            *super().get_urls(),
        ]

    @admin.action(description="Export postings of the selected entries (CSV)")
    def export_csv(self, request: HttpRequest, queryset: QuerySet[JournalEntry]) -> HttpResponse:
        body = exports.ledger_csv(Posting.objects.filter(entry__in=queryset))
        return _download(body.encode(), "ledger.csv", "text/csv")

    @admin.action(description="Export postings of the selected entries (XLSX)")
    def export_xlsx(self, request: HttpRequest, queryset: QuerySet[JournalEntry]) -> HttpResponse:
        body = exports.ledger_xlsx(Posting.objects.filter(entry__in=queryset))
        return _download(body, "ledger.xlsx", XLSX)

    def reconciliation_view(self, request: HttpRequest) -> HttpResponse:
        params = request.GET
        run_id = params.get("run") or None
        start = _day(params.get("start"))
        end = _day(params.get("end"))
        platform = params.get("platform") or None
        report = None
        if run_id or start or end:
            try:
                report = reconcile(run_id=run_id, start=start, end=end, platform=platform)
            except Exception as error:  # a malformed run id: say so on the page
                messages.error(request, f"cannot build the report: {error}")
        if report is not None and params.get("format") == "csv":
            return _download(
                exports.reconciliation_csv(report).encode(), "reconciliation.csv", "text/csv"
            )
        if report is not None and params.get("format") == "xlsx":
            return _download(exports.reconciliation_xlsx(report), "reconciliation.xlsx", XLSX)
        context = {
            **self.admin_site.each_context(request),
            "title": "Reconciliation",
            "report": report,
            "statuses": STATUSES,
            "params": params,
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/billing/reconciliation.html", context)


XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


def _download(body: bytes, filename: str, content_type: str) -> HttpResponse:
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def _day(value: str | None) -> datetime | None:
    parsed = parse_date(value) if value else None
    return timezone.make_aware(datetime.combine(parsed, time.min)) if parsed else None


@admin.register(SampleSettlement)
class SampleSettlementAdmin(ReadOnlyAdmin):
    list_display = ["sample_id", "run", "reason", "reserved", "captured", "released", "entry"]
    list_filter = ["reason"]
    search_fields = ["run__id"]


class StatementLineInline(ReadOnlyInline):
    model = UpstreamStatementLine
    fields = ["row_no", "upstream_id", "amount", "currency", "occurred_at"]


@admin.register(UpstreamStatement)
class UpstreamStatementAdmin(ReadOnlyAdmin):
    list_display = ["id", "provider", "filename", "rows", "imported_at"]
    inlines = [StatementLineInline]
