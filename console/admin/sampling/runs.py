"""Runs: the list with outcomes, the run page (live progress, counts per layer and platform,
failure reasons, money, links to report and campaign), cancel, and the run report."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.utils import display_for_value
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import redirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.views.decorators.clickjacking import xframe_options_sameorigin

from analysis.report_exports import FORMATS, render_report, stream_report
from analysis.reports import ReportIntegrityError, build_run_report
from billing.selectors import cancel_release, run_billing, snapshot
from console.admin_base import TenantScopedAdmin
from console.widgets import (
    LAYER_STATES,
    money,
    outcome_badge,
    plural,
    pretty_json,
    samples_url,
    status_context,
)
from pipeline.runs import RunAlreadyFinished, cancel_run, platforms_to_stop_upstream
from sampling.models import Batch, Run
from sampling.selectors import (
    Status,
    batch_statuses,
    failure_reasons,
    platform_statuses,
    run_outcomes,
    upstream_cancels,
)
from sampling.selectors import run_status as status_of_run
from tenancy.roles import REPORT_ROLES
from tenancy.scope import allows_on, scoped, user_scope

_STATUS_ATTR = "_console_status"
CONTENT_TYPES = {
    "json": "application/json",
    "csv": "text/csv; charset=utf-8",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "html": "text/html; charset=utf-8",
}


def _run_status(run: Run) -> Status:
    status = getattr(run, _STATUS_ATTR, None)
    if status is None:
        status = status_of_run(run_id=run.pk)
        setattr(run, _STATUS_ATTR, status)
    return cast(Status, status)


class RunChangeList(ChangeList):
    """Fetches the status of the runs on the page through the aggregation service once."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        runs = list(self.result_list)
        statuses = run_outcomes(run_ids=[run.pk for run in runs])
        for run in runs:
            setattr(run, _STATUS_ATTR, statuses[run.pk])


class RunFinishedFilter(admin.SimpleListFilter):
    title = "finished"
    parameter_name = "finished"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Finished"), ("no", "Not finished")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "yes":
            return queryset.filter(finished_at__isnull=False)
        if self.value() == "no":
            return queryset.filter(finished_at__isnull=True)
        return queryset


def _count_column(name: str) -> Any:
    @admin.display(description=name)
    def column(self: RunAdmin, run: Run) -> int:
        return cast(int, getattr(_run_status(run), name))

    column.__name__ = f"{name}_count"
    return column


def may_read_report(request: HttpRequest, run: Run) -> bool:
    tenants = user_scope(request.user).tenant_ids_for_roles(REPORT_ROLES)
    return tenants is None or run.tenant_id in tenants


@admin.register(Run)
class RunAdmin(TenantScopedAdmin):
    """Runs are launched from a campaign's plan preview and never edited."""

    list_display = (
        "short_id",
        "tenant",
        "campaign_name",
        "created",
        "finished",
        "planned",
        "outcome",
        "succeeded_count",
        "failed_count",
        "invalid_count",
        "review_count",
        "pending_count",
    )
    list_select_related = ("tenant", "campaign")
    list_filter = ("tenant", RunFinishedFilter, "campaign")
    list_per_page = 25
    fields = (
        "id",
        "tenant",
        "campaign_link",
        "created_at",
        "finished_at",
        "cancelled_at",
        "planned_samples",
        "priority",
        "config",
        "quote",
    )
    readonly_fields = fields
    actions = ("cancel_runs",)
    change_form_template = "admin/sampling/run/change_form.html"
    change_list_template = "admin/sampling/run/change_list.html"

    succeeded_count = _count_column("succeeded")
    failed_count = _count_column("failed")
    invalid_count = _count_column("invalid")
    review_count = _count_column("review")
    pending_count = _count_column("pending")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    action_permissions = {"cancel": "change"}

    def has_cancel_permission(self, request: HttpRequest, run: Run | None = None) -> bool:
        """Cancelling is a change of the run, by the role in the run's own tenant."""
        return self.role_allows(request, "change", run)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return RunChangeList

    @admin.display(description="run", ordering="id")
    def short_id(self, run: Run) -> str:
        return str(run.pk)[:8]

    @admin.display(description="campaign", ordering="campaign__name")
    def campaign_name(self, run: Run) -> str:
        return run.campaign.name

    @admin.display(description="campaign")
    def campaign_link(self, run: Run) -> str:
        return run.campaign.name

    @admin.display(description="created", ordering="created_at")
    def created(self, run: Run) -> datetime:
        return run.created_at

    @admin.display(description="finished", ordering="finished_at", empty_value="–")
    def finished(self, run: Run) -> datetime | None:
        return run.finished_at

    @admin.display(description="planned", ordering="planned_samples")
    def planned(self, run: Run) -> int:
        return run.planned_samples

    @admin.display(description="outcome")
    def outcome(self, run: Run) -> SafeString:
        return outcome_badge(_run_status(run))

    @admin.display(description="config snapshot (frozen at launch)")
    def config(self, run: Run) -> SafeString:
        return pretty_json(run.config_snapshot)

    @admin.display(description="quote snapshot (minor units, as frozen)")
    def quote(self, run: Run) -> SafeString:
        if run.quote_snapshot is None:
            return format_html('<span class="geo-muted">{}</span>', "no quote recorded")
        return pretty_json(run.quote_snapshot)

    @admin.action(description="Cancel the selected runs…", permissions=["cancel"])
    def cancel_runs(self, request: HttpRequest, queryset: QuerySet[Run]) -> TemplateResponse | None:
        """First a confirmation page naming what each run releases and keeps charged (as
        Django's delete action does); its confirm button posts the action again."""
        if request.POST.get("confirm") != "yes":
            return self._cancel_confirmation(request, list(queryset), action=True)
        for run in queryset:
            try:
                cancelled = cancel_run(run_id=run.pk, reason=_cancel_reason(request))
            except RunAlreadyFinished:
                self.message_user(request, f"{run}: already finished; not cancelled.", "warning")
                continue
            self.message_user(request, _cancelled_message(run, cancelled), messages.SUCCESS)
        return None

    def _cancel_confirmation(
        self, request: HttpRequest, runs: list[Run], *, action: bool
    ) -> TemplateResponse:
        rows = [cancel_row(run) for run in runs]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Cancel this run?" if len(runs) == 1 else f"Cancel {len(runs)} runs?",
            "rows": rows,
            "cancellable": [row for row in rows if row["cancellable"]],
            "action": action,
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
            "original": runs[0] if not action and runs else None,
        }
        return TemplateResponse(request, "admin/sampling/run/cancel_confirmation.html", context)

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        report_download = wrap(xframe_options_sameorigin(self.report_download_view))
        return [
            self.object_url("progress", self.progress_view),
            self.object_url("cancel", self.cancel_view),
            self.object_url("report", self.report_view),
            path(
                "<path:object_id>/report.<str:fmt>",
                report_download,
                name="sampling_run_report_download",
            ),
            *super().get_urls(),
        ]

    def change_view_context(self, request: HttpRequest, obj: Any) -> dict[str, Any]:
        return _run_detail_context(request, obj, self)

    def progress_view(self, request: HttpRequest, object_id: str) -> JsonResponse:
        """Everything the run page shows, from one snapshot: the status counts, each panel
        rendered by the page's own templates, and the run's changing fields."""
        run = self._scoped_object_or_404(request, object_id)
        with snapshot():
            run.refresh_from_db()
            context = _run_detail_context(request, run, self)
            panels = {
                panel_id: render_to_string(template, context, request)
                for panel_id, template in RUN_PANELS.items()
            }
        status: Status = context["status"]
        return JsonResponse(
            {
                **status.as_dict(),
                "outcome_label": context["outcome_label"],
                "percent_terminal": context["percent_terminal"],
                "segments": context["segments"],
                "panels": panels,
                "fields": {
                    name: str(display_for_value(getattr(run, name), "–"))
                    for name in ("finished_at", "cancelled_at")
                },
            }
        )

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET: what cancelling would release and keep charged; POST: cancel."""
        run = self._scoped_object_or_404(request, object_id)
        if not self.has_cancel_permission(request, run):
            raise PermissionDenied
        if request.method != "POST":
            return self._cancel_confirmation(request, [run], action=False)
        try:
            cancelled = cancel_run(run_id=run.pk, reason=_cancel_reason(request))
        except RunAlreadyFinished:
            messages.warning(request, "This run already finished; it was not cancelled.")
            return redirect("admin:sampling_run_change", run.pk)
        self.log_change(request, run, f"Cancelled: {cancelled} samples not yet submitted")
        messages.success(request, _cancelled_message(run, cancelled))
        return redirect("admin:sampling_run_change", run.pk)

    def _reportable_run(self, request: HttpRequest, object_id: str) -> Run:
        run = cast(Run, self._scoped_object_or_404(request, object_id))
        if not may_read_report(request, run):
            raise Http404("no such run")  # finance reads money, not answers
        return run

    def report_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        run = self._reportable_run(request, object_id)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "original": run,
            "title": f"Report: {run.campaign.name}",
            "formats": [f for f in FORMATS if f != "html"],
        }
        return TemplateResponse(request, "admin/sampling/run/report.html", context)

    def report_download_view(
        self, request: HttpRequest, object_id: str, fmt: str
    ) -> HttpResponse | StreamingHttpResponse:
        run = self._reportable_run(request, object_id)
        if fmt not in FORMATS:
            raise Http404(f"unknown report format {fmt}")
        try:
            report = build_run_report(run_id=run.pk)
        except ReportIntegrityError as error:
            return HttpResponse(f"report refused: {error}", status=409, content_type="text/plain")
        response: HttpResponse | StreamingHttpResponse = (
            StreamingHttpResponse(stream_report(report, fmt), content_type=CONTENT_TYPES[fmt])
            if fmt == "csv"
            else HttpResponse(render_report(report, fmt), content_type=CONTENT_TYPES[fmt])
        )
        if fmt != "html":
            name = f"run-{str(run.pk)[:8]}-report.{fmt}"
            response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response


RUN_PANELS = {
    f"run-{name}": f"admin/sampling/run/_{name}_panel.html"
    for name in ("status", "money", "platforms", "failures", "layers", "batches")
}


def cancel_row(run: Run) -> dict[str, Any]:
    """One run on the cancel confirmation: what stops, what is released, what stays charged."""
    status = status_of_run(run_id=run.pk)
    release = cancel_release(run_id=run.pk)
    currency = release.currency or ""
    return {
        "run": run,
        "cancellable": run.finished_at is None and run.cancelled_at is None,
        "status": status,
        "outcome_label": status_context(status)["outcome_label"],
        "stopping": plural(release.samples, "sample"),
        "continuing": plural(max(status.pending - release.samples, 0), "sample"),
        "charged_samples": plural(release.samples_charged, "sample"),
        "released": money(release.released, currency),
        "still_held": money(release.still_held, currency),
        "charged": money(release.charged, currency),
        "holds_money": bool(currency),
        "stopped_upstream": ", ".join(platforms_to_stop_upstream(run_id=run.pk)),
    }


def _cancelled_message(run: Run, cancelled: int) -> str:
    return (
        f"Run {str(run.pk)[:8]} cancelled: {plural(cancelled, 'sample')} not yet submitted "
        "will not run and their hold is released. Upstreams that can stop a task they "
        "accepted are asked to (the run page shows their answers); work the upstream "
        "finishes anyway is charged."
    )


def upstream_cancel_note(run: Run) -> str:
    """What the run's cancel asked of its upstreams, for the run page; empty when nothing
    was (or is yet) asked."""
    asked = upstream_cancels(run_id=run.pk)
    if not asked.asked:
        return ""
    parts = [f"acknowledged {asked.acknowledged}"]
    if asked.failed:
        parts.append(f"{asked.failed} could not be asked")
    if waiting := asked.asked - asked.answered:
        parts.append(f"{waiting} without an answer yet")
    return f"Upstream cancel asked for {plural(asked.asked, 'task')}, {', '.join(parts)}."


def _cancel_reason(request: HttpRequest) -> str:
    return f"cancelled in the console by {request.user}"


def _money_summary(run: Run) -> dict[str, str] | None:
    billing = run_billing(run_id=run.pk, scan_samples=False)
    if billing.currency is None:
        return None
    currency = billing.currency
    return {
        "price_version": billing.price_version or "–",
        "estimated_max": money(billing.estimated_max, currency),
        "held": money(billing.held, currency),
        "charged": money(billing.captured, currency),
        "released": money(billing.released, currency),
        "refunded": money(billing.refunded, currency),
        "samples_charged": str(billing.samples_charged),
    }


def _run_detail_context(request: HttpRequest, run: Run, model_admin: RunAdmin) -> dict[str, Any]:
    status = status_of_run(run_id=run.pk)
    user = request.user
    can_see_samples = allows_on(user, "sampling.view_sample", run)
    layers = [
        {
            "name": layer,
            "states": [(state, status.layers.get(layer, {}).get(state, 0)) for state in states],
        }
        for layer, states in LAYER_STATES.items()
    ]
    page = Paginator(run.batches.order_by("index"), 25).get_page(request.GET.get("batch_page"))
    batches = list(page.object_list)
    statuses = batch_statuses(batches=batches)
    batch_rows = [
        {
            "batch": batch,
            "samples_url": samples_url(batch=batch.pk),
            **status_context(statuses[batch.pk]),
        }
        for batch in batches
    ]
    platform_rows = [
        {"platform": platform, "samples_url": samples_url(run=run.pk, platform=platform)}
        | status_context(platform_status)
        for platform, platform_status in platform_statuses(run_id=run.pk).items()
    ]
    return {
        **status_context(status),
        "run_panels": list(RUN_PANELS.values()),
        "run": run,
        "layers": layers,
        "batch_page": page,
        "batch_rows": batch_rows,
        "platform_rows": platform_rows,
        "failure_rows": [
            {
                "reason": reason,
                "count": n,
                "samples_url": samples_url(run=run.pk, failure_reason=reason),
            }
            for reason, n in failure_reasons(run_id=run.pk)
        ],
        "money_summary": _money_summary(run),
        "upstream_cancel_note": upstream_cancel_note(run) if run.cancelled_at else "",
        "can_see_samples": can_see_samples,
        "can_cancel": model_admin.has_cancel_permission(request, run)
        and run.finished_at is None
        and run.cancelled_at is None,
        "report_url": reverse("admin:sampling_run_report", args=[run.pk])
        if may_read_report(request, run)
        else "",
        "campaign_url": reverse("admin:sampling_campaign_change", args=[run.campaign_id])
        if allows_on(user, "sampling.view_campaign", run)
        else "",
        "dashboard_url": reverse("admin:sampling_campaign_dashboard", args=[run.campaign_id])
        if can_see_samples
        else "",
        "progress_url": reverse("admin:sampling_run_progress", args=[run.pk]),
        "cancel_url": reverse("admin:sampling_run_cancel", args=[run.pk]),
        "run_samples_url": samples_url(run=run.pk),
    }


RUN_CHOICES = 200  # the newest runs a chooser offers; older ones by date range


def run_choices(request: HttpRequest) -> dict[str, Any]:
    """What a run chooser (reconciliation) offers: the reader's newest runs, named by
    campaign, tenant and launch time, and the platforms those runs used."""
    runs = scoped(Run.objects.select_related("campaign", "tenant"), request.user).order_by(
        "-created_at"
    )
    return {
        "run_choices": [
            (
                str(run.pk),
                f"{run.campaign.name} · {run.tenant.slug} · {run.created_at:%Y-%m-%d %H:%M}"
                f" · {str(run.pk)[:8]}",
            )
            for run in runs[:RUN_CHOICES]
        ],
        "platform_choices": sorted(
            set(
                Batch.objects.filter(run__in=runs.values("pk"))
                .values_list("platform", flat=True)
                .distinct()
            )
        ),
    }
