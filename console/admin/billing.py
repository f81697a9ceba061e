"""Finance in the console: ledger and balances (major units with the currency code), price
lists, top-up, statements (with import), and the reconciliation report (per run and per
period, totals, pagination) with CSV / XLSX export. Every row through tenancy.scope."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, time
from typing import IO, Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Min, Q, QuerySet, Sum
from django.http import (
    FileResponse,
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    JsonResponse,
    StreamingHttpResponse,
)
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.dateparse import parse_date

from billing import exports
from billing import imports as statement_imports
from billing.models import (
    Account,
    ImportStatus,
    JournalEntry,
    Posting,
    Price,
    PriceVersion,
    SampleSettlement,
    StatementImport,
    StatementVoid,
    UpstreamStatement,
    UpstreamStatementLine,
)
from billing.reconciliation import (
    STATUS_EXPLANATIONS,
    STATUSES,
    StatementError,
    max_statement_bytes,
    money_totals,
    reconcile,
    restricted_to_runs,
    void_statement,
)
from billing.selectors import account_balance, tenant_balances
from billing.services import (
    DEFAULT_CURRENCY,
    BillingError,
    format_amount,
    parse_amount,
    top_up,
    was_replayed,
)
from connectors.registry import known_platforms
from console.admin.sampling.runs import run_choices
from console.admin_base import ReadOnlyMixin, ScopedInline, TenantScopedAdmin
from console.widgets import money
from sampling.models import Run
from sampling.snapshots import Quote
from tenancy.models import Tenant
from tenancy.roles import TOP_UP_PERMISSION
from tenancy.scope import (
    require_platform_finance,
    scoped_by,
    scoped_get_or_404,
    tenants_where,
)

SETTLEMENTS = "billing.view_samplesettlement"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"


class ReadOnlyAdmin(ReadOnlyMixin, TenantScopedAdmin):
    """Ledger rows are written by services only and never changed."""


class ReadOnlyInline(ReadOnlyMixin, ScopedInline):
    """Every shown field is read-only: subclasses name `fields` once."""

    extra = 0
    can_delete = False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [str(name) for name in self.fields or ()]


class PriceInline(admin.TabularInline):
    model = Price
    extra = 3
    can_delete = False
    fields = ["platform", "component", "amount"]
    help_texts = {"amount": "minor units (cents)"}

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None


@admin.register(PriceVersion)
class PriceVersionAdmin(TenantScopedAdmin):
    """A price change is a new version (added here); existing versions cannot be edited."""

    list_display = ["name", "currency", "effective_from", "created_at"]
    inlines = [PriceInline]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# --- top-up -------------------------------------------------------------------------------


class TopUpForm(forms.Form):
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none())
    amount = forms.CharField(help_text="major units, e.g. 250.00")
    currency = forms.CharField(initial=DEFAULT_CURRENCY, max_length=3)
    key = forms.CharField(
        max_length=150,
        help_text="the payment's reference: the same key never books twice",
    )
    memo = forms.CharField(required=False, max_length=200)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if cleaned.get("amount") and cleaned.get("currency"):
            try:
                cleaned["minor"] = parse_amount(cleaned["amount"], cleaned["currency"])
            except BillingError as error:
                self.add_error("amount", str(error))
        return cleaned


def top_up_outcome(tenant: Tenant, entry: JournalEntry, key: str) -> str:
    """What a top-up did, in the entry's own amount: a key used before credits nothing again."""
    credit = entry.postings.filter(amount__gt=0).select_related("account").first()
    amount = format_amount(credit.amount, credit.account.currency) if credit else "?"
    if was_replayed(entry):
        return (
            f"{tenant.slug}: already credited: key {key!r} booked {amount} as entry {entry.pk}; "
            "nothing was booked again."
        )
    return f"{tenant.slug}: {amount} credited (entry {entry.pk})."


def top_up_tenants(request: HttpRequest) -> QuerySet[Tenant]:
    """Tenants where the user's role may top up (finance; superusers: all)."""
    return tenants_where(request.user, TOP_UP_PERMISSION).order_by("slug")


# --- accounts and ledger ------------------------------------------------------------------


@admin.register(Account)
class AccountAdmin(ReadOnlyAdmin):
    list_display = ["code", "kind", "currency", "tenant", "cached", "derived"]
    list_filter = ["kind", "currency"]
    search_fields = ["code", "tenant__slug"]
    change_list_template = "admin/billing/account/change_list.html"

    @admin.display(description="cached balance")
    def cached(self, obj: Account) -> str:
        return format_amount(obj.balance, obj.currency) if obj.tracks_balance else "-"

    @admin.display(description="balance (from postings)")
    def derived(self, obj: Account) -> str:
        return format_amount(account_balance(obj), obj.currency)

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.top_up_view)
        return [path("top-up/", view, name="billing_top_up"), *super().get_urls()]

    def top_up_view(self, request: HttpRequest) -> HttpResponse:
        if not request.user.has_perm(TOP_UP_PERMISSION):
            raise PermissionDenied
        tenants = top_up_tenants(request)
        form = TopUpForm(request.POST or None, initial={"tenant": request.GET.get("tenant")})
        form.fields["tenant"].queryset = tenants  # type: ignore[attr-defined]
        if request.method == "POST" and form.is_valid():
            data = form.cleaned_data
            try:
                entry = top_up(
                    tenant=data["tenant"],
                    amount=data["minor"],
                    currency=data["currency"],
                    idempotency_key=data["key"],
                    memo=data["memo"] or f"top-up by {request.user}",
                )
            except BillingError as error:
                messages.error(request, f"Not topped up: {error}")
            else:
                self.log_addition(request, entry, f"Top-up of {data['tenant'].slug}")
                messages.success(request, top_up_outcome(data["tenant"], entry, data["key"]))
                return redirect("admin:billing_account_changelist")
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Top up a tenant",
            "form": form,
            "balances": [
                (tenant.slug, money(b.available, b.currency), money(b.held, b.currency))
                for tenant in tenants
                for b in tenant_balances(tenant)
            ],
        }
        return TemplateResponse(request, "admin/billing/top_up.html", context)


class PostingInline(ReadOnlyInline):
    model = Posting
    fields = ["account", "amount_text"]

    @admin.display(description="amount")
    def amount_text(self, posting: Posting) -> str:
        return money(posting.amount, posting.account.currency)


class SettlementMoney:
    """A settlement's amounts in the currency of its run's quote."""

    @staticmethod
    def _money(settlement: SampleSettlement, amount: int) -> str:
        quote = Quote.of(settlement.run)
        return money(amount, quote.currency if quote is not None else "")

    @admin.display(description="reserved")
    def reserved_text(self, settlement: SampleSettlement) -> str:
        return self._money(settlement, settlement.reserved)

    @admin.display(description="captured")
    def captured_text(self, settlement: SampleSettlement) -> str:
        return self._money(settlement, settlement.captured)

    @admin.display(description="released")
    def released_text(self, settlement: SampleSettlement) -> str:
        return self._money(settlement, settlement.released)


SETTLEMENT_MONEY = ["reserved_text", "captured_text", "released_text"]


class SettlementInline(SettlementMoney, ReadOnlyInline):
    model = SampleSettlement
    fields = ["sample", "reason", *SETTLEMENT_MONEY]


@admin.register(JournalEntry)
class JournalEntryAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "created_at",
        "kind",
        "tenant",
        "amount",
        "run_short",
        "sample_id",
        "upstream_id",
        "key_short",
    ]
    list_filter = ["kind", "created_at"]
    list_select_related = ["tenant"]
    search_fields = ["idempotency_key", "upstream_id"]
    inlines = [PostingInline, SettlementInline]
    actions = ["export_csv", "export_xlsx"]
    change_list_template = "admin/billing/journalentry/change_list.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet[JournalEntry]:
        # An entry's amount is what moved: the sum of its positive legs (they sum to zero).
        return (
            super()
            .get_queryset(request)
            .annotate(
                moved=Sum("postings__amount", filter=Q(postings__amount__gt=0)),
                moved_currency=Min("postings__account__currency"),
            )
        )

    @admin.display(description="amount", ordering="moved")
    def amount(self, entry: JournalEntry) -> str:
        return money(getattr(entry, "moved", None), getattr(entry, "moved_currency", "") or "")

    @admin.display(description="run", ordering="run_id")
    def run_short(self, entry: JournalEntry) -> str:
        return str(entry.run_id)[:8] if entry.run_id else "–"

    @admin.display(description="idempotency key", ordering="idempotency_key")
    def key_short(self, entry: JournalEntry) -> str:
        key = entry.idempotency_key  # the full key is on the entry's page
        return key if len(key) <= 28 else key[:27] + "…"

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.reconciliation_view)
        return [
            path("reconciliation/", view, name="billing_reconciliation"),
            *super().get_urls(),
        ]

    @admin.action(description="Export postings of the selected entries (CSV)", permissions=["view"])
    def export_csv(
        self, request: HttpRequest, queryset: QuerySet[JournalEntry]
    ) -> HttpResponseBase:
        chunks = exports.ledger_csv_chunks(Posting.objects.filter(entry__in=queryset))
        return _csv_download(chunks, "ledger.csv")

    @admin.action(
        description="Export postings of the selected entries (XLSX)", permissions=["view"]
    )
    def export_xlsx(
        self, request: HttpRequest, queryset: QuerySet[JournalEntry]
    ) -> HttpResponseBase:
        book = exports.ledger_xlsx_file(Posting.objects.filter(entry__in=queryset))
        return _xlsx_download(book, "ledger.xlsx")

    def reconciliation_view(self, request: HttpRequest) -> HttpResponseBase:
        params = request.GET
        run_id = params.get("run") or None
        if run_id:  # before the permission check: a 403 would confirm the run exists
            run_id = str(_scoped_run(request, run_id).pk)
        if not self.has_view_permission(request):
            raise PermissionDenied
        start, end = _day(params.get("start")), _day(params.get("end"))
        platform = params.get("platform") or None
        report = None
        if run_id or start or end:
            report = reconcile(run_id=run_id, start=start, end=end, platform=platform)
            if not request.user.is_superuser:
                # The runs whose tenant's role reads money (finance), not every visible run.
                runs = scoped_by(Run.objects.all(), request.user, SETTLEMENTS).values_list(
                    "id", flat=True
                )
                report = restricted_to_runs(report, {str(pk) for pk in runs})
        if report is not None and params.get("format") == "csv":
            return _csv_download(exports.reconciliation_csv_chunks(report), "reconciliation.csv")
        if report is not None and params.get("format") == "xlsx":
            book = exports.reconciliation_xlsx_file(report)
            return _xlsx_download(book, "reconciliation.xlsx")
        return TemplateResponse(
            request,
            "admin/billing/reconciliation.html",
            {
                **self.admin_site.each_context(request),
                "title": "Reconciliation",
                "opts": self.model._meta,
                "params": params,
                **run_choices(request),
                **_report_context(report, params.get("page")),
            },
        )


def _scoped_run(request: HttpRequest, run_id: str) -> Run:
    try:
        return scoped_get_or_404(Run.objects.all(), request.user, pk=run_id)
    except Exception as error:  # a malformed id is as unknown as another tenant's
        raise Http404("no such run") from error


def _report_context(report: Any, page_number: str | None) -> dict[str, Any]:
    if report is None:
        return {"report": None, "explanations": _explanations()}
    page = Paginator(report.rows, 100).get_page(page_number)
    rows = [
        {
            "r": r,
            "charge": money(r.charge, r.charge_currency),
            "recorded_cost": money(r.recorded_cost, r.recorded_currency),
            "statement_cost": money(r.statement_cost, r.statement_currency),
            # statement - recorded has a single currency only when both sides agree
            "difference": money(r.difference, "" if "/" in r.cost_currency else r.cost_currency),
        }
        for r in page.object_list
    ]
    totals = [
        {"currency": currency, **{k: money(v, currency) for k, v in amounts.items()}}
        for currency, amounts in sorted(money_totals(report).items())
    ]
    return {
        "report": report,
        "page": page,
        "rows": rows,
        "money_totals": totals,
        "status_counts": [(s, report.totals.get(s, 0)) for s in STATUSES],
        "explanations": _explanations(),
    }


def _explanations() -> list[tuple[str, str]]:
    return [(status, STATUS_EXPLANATIONS[status]) for status in STATUSES]


def _csv_download(chunks: Iterator[str], filename: str) -> StreamingHttpResponse:
    """A CSV streamed as it is written (exports.py): memory and time linear in the rows."""
    response = StreamingHttpResponse(chunks, content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def _xlsx_download(book: IO[bytes], filename: str) -> FileResponse:
    """A workbook written to a temporary file, streamed from it and closed after."""
    return FileResponse(book, as_attachment=True, filename=filename, content_type=XLSX)


def _day(value: str | None) -> datetime | None:
    parsed = parse_date(value) if value else None
    return timezone.make_aware(datetime.combine(parsed, time.min)) if parsed else None


@admin.register(SampleSettlement)
class SampleSettlementAdmin(SettlementMoney, ReadOnlyAdmin):
    list_display = ["sample_id", "run", "reason", *SETTLEMENT_MONEY, "entry"]
    list_filter = ["reason"]
    list_select_related = ["run"]


# --- statements ---------------------------------------------------------------------------


class StatementLineInline(ReadOnlyInline):
    """A statement's lines, to whoever may open the statement (platform finance: the scope
    lets no one else see statements or their lines)."""

    model = UpstreamStatementLine
    fields = ["row_no", "upstream_id", "amount_text", "occurred_at"]

    @admin.display(description="amount")
    def amount_text(self, line: UpstreamStatementLine) -> str:
        return money(line.amount, line.currency)


class StatementUploadForm(forms.Form):
    provider = forms.ChoiceField(
        choices=(), help_text="the configured platform that billed the platform operator"
    )
    file = forms.FileField(
        help_text="CSV: upstream_id,amount,currency,occurred_at (amount in major units, e.g. 0.90)"
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choices = [("", "— choose the provider —")] + [(p, p) for p in known_platforms()]
        self.fields["provider"].choices = choices  # type: ignore[attr-defined]


class StatementVoidForm(forms.Form):
    reason = forms.CharField(
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="why this statement is wrong (kept with the correction)",
    )


@admin.register(UpstreamStatement)
class UpstreamStatementAdmin(ReadOnlyAdmin):
    """Provider statements are the platform operator's bill: platform finance imports, reads
    and voids them (tenancy.scope PLATFORM rows); a tenant's finance sees its own runs'
    reconciliation instead."""

    list_display = ["id", "provider", "filename", "rows", "imported_at", "voided"]
    list_filter = ["provider"]
    list_select_related = ["void"]
    inlines = [StatementLineInline]
    change_list_template = "admin/billing/upstreamstatement/change_list.html"
    change_form_template = "admin/billing/upstreamstatement/change_form.html"

    @admin.display(description="voided")
    def voided(self, statement: UpstreamStatement) -> str:
        void = getattr(statement, "void", None)
        return f"voided {void.voided_at:%Y-%m-%d} by {void.voided_by}" if void else "–"

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.import_view)
        return [
            path("import/", view, name="billing_statement_import"),
            path(
                "imports/<int:import_id>/",
                self.admin_site.admin_view(self.import_status_view),
                name="billing_statement_import_status",
            ),
            path(
                "imports/<int:import_id>/progress/",
                self.admin_site.admin_view(self.import_progress_view),
                name="billing_statement_import_progress",
            ),
            self.object_url("void", self.void_view, post_only=True),
            *super().get_urls(),
        ]

    def change_view_context(self, request: HttpRequest, obj: Any) -> dict[str, Any]:
        void = StatementVoid.objects.filter(statement=obj).first()
        return {
            "statement_void": void,
            "void_form": StatementVoidForm() if void is None else None,
            "lines_shown": obj.lines.count(),
        }

    def void_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        statement = self._scoped_object_or_404(request, object_id)
        require_platform_finance(request.user)
        form = StatementVoidForm(request.POST)
        url = reverse("admin:billing_upstreamstatement_change", args=[statement.pk])
        if not form.is_valid():
            messages.error(request, "Not voided: say why the statement is wrong.")
            return redirect(url)
        try:
            void_statement(
                statement_id=statement.pk,
                reason=form.cleaned_data["reason"],
                voided_by=request.user.get_username(),
            )
        except StatementError as error:
            messages.error(request, f"Not voided: {error}")
        else:
            messages.success(
                request,
                f"Statement {statement.pk} voided: its {statement.rows} rows no longer count. "
                "Import the right file (or this one under the right provider) again.",
            )
        return redirect(url)

    def import_view(self, request: HttpRequest) -> HttpResponse:
        """The form answers at once: the file is kept and queued (its size was checked from
        Content-Length before the body was read: console.upload_limit), a worker imports it
        and the import's page shows the progress."""
        require_platform_finance(request.user)
        form = StatementUploadForm(request.POST or None, request.FILES or None)
        problems: list[str] = []
        if request.method == "POST" and form.is_valid():
            try:
                job = statement_imports.queue_import(
                    provider=form.cleaned_data["provider"],
                    upload=form.cleaned_data["file"],
                    imported_by=request.user.get_username(),
                )
            except StatementError as error:
                problems = error.problems
            else:
                return redirect(reverse("admin:billing_statement_import_status", args=[job.pk]))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Import a provider statement",
            "form": form,
            "problems": problems,
            "max_mib": max_statement_bytes() // (1024 * 1024),
        }
        return TemplateResponse(request, "admin/billing/statement_import.html", context)

    def _import_or_404(self, request: HttpRequest, import_id: int) -> StatementImport:
        require_platform_finance(request.user)
        job = StatementImport.objects.filter(pk=import_id).select_related("statement").first()
        if job is None:
            raise Http404("no such statement import")
        return job

    def import_status_view(self, request: HttpRequest, import_id: int) -> HttpResponse:
        job = self._import_or_404(request, import_id)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"Statement import #{job.pk}: {job.filename}",
            "job": job,
            "outcome": _job_outcome(job),
            "finished": job.status in statement_imports.FINISHED,
            "progress_url": reverse("admin:billing_statement_import_progress", args=[job.pk]),
        }
        return TemplateResponse(request, "admin/billing/statement_import_status.html", context)

    def import_progress_view(self, request: HttpRequest, import_id: int) -> HttpResponse:
        """The import page's poll (console/static/console/statement_import.js)."""
        job = self._import_or_404(request, import_id)
        body = statement_imports.progress(job)
        body["finished"] = job.status in statement_imports.FINISHED
        body["outcome"] = _job_outcome(job)
        return JsonResponse(body)


def _job_outcome(job: StatementImport) -> str:
    if job.status == ImportStatus.QUEUED:
        return "Queued: a worker will check the file shortly."
    if job.status == ImportStatus.RUNNING:
        if job.rows_total is None:
            return f"Checking the rows: {job.rows_checked} checked so far."
        return f"Writing the rows: {job.rows_done} of {job.rows_total} written."
    if job.status == ImportStatus.FAILED:
        count = len(job.errors)
        return f"Nothing was imported: {count} problem{'s' if count != 1 else ''} in the file."
    return _import_outcome(job)


def _import_outcome(result: Any) -> str:
    statement = result.statement
    if not result.created:
        return (
            f"Already imported: this file is statement {statement.pk} of {statement.provider} "
            f"({statement.rows} rows); nothing was imported again."
        )
    return (
        f"Statement {statement.pk}: {result.imported} rows imported, "
        f"{result.already_known} already known from earlier statements of {statement.provider}."
    )
