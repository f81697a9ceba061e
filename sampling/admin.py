"""Operator console (DESIGN.md §1, §5): tenants, brands, campaigns, plan preview and launch,
runs and samples.

Thin entry points: every write goes through `sampling.services`, every run or batch status comes
from `sampling.selectors.run_status` / `batch_status`. Rows that record history (attempts,
captures, evidence, mentions, stale writes, outbox) are read-only here.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from datetime import datetime
from typing import Any, cast
from uuid import UUID

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.contrib.sessions.backends.db import SessionStore as DbSessionStore
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db import models, transaction
from django.db.models import Count, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.views.decorators.http import require_POST

from analysis.models import Mention
from analysis.selectors import ambiguity_warnings
from connectors.registry import known_platforms
from evidence.models import Capture

from .models import (
    AnalysisState,
    Attempt,
    Batch,
    Brand,
    Campaign,
    CollectionState,
    Competitor,
    EvidenceState,
    OutboxMessage,
    PlatformTarget,
    Question,
    Run,
    Sample,
    StaleWrite,
    SubmissionState,
    Tenant,
)
from .planning import CampaignSpec, PlanError, batch_sizes, normalize_text
from .selectors import Outcome, Status, batch_status, run_outcomes, run_status
from .services import (
    campaign_as_spec,
    campaign_spec_data,
    launch_run,
    preview_plan,
    revise_question,
)

admin.site.site_header = "GEO operator console"
admin.site.site_title = "GEO console"
admin.site.index_title = "Campaigns, runs and evidence"
# The console's tables (runs, samples) are wide; the app list is one click away in the header.
admin.site.enable_nav_sidebar = False

OUTCOME_LABELS: dict[Outcome, str] = {
    Outcome.IN_PROGRESS: "In progress",
    Outcome.ALL_SUCCEEDED: "All succeeded",
    Outcome.PARTIALLY_SUCCEEDED: "Partially succeeded",
    Outcome.ALL_FAILED: "All failed",
    Outcome.EMPTY: "No samples",
}
LAYER_STATES: dict[str, list[str]] = {
    "submission": list(SubmissionState.values),
    "collection": list(CollectionState.values),
    "evidence": list(EvidenceState.values),
    "analysis": list(AnalysisState.values),
}
# Bar segments in display order; the remainder of the bar is pending work.
STATUS_SEGMENTS = ("succeeded", "review", "invalid", "failed", "pending")


# --- shared console pieces ------------------------------------------------------------------


class CappedCountPaginator(Paginator):
    """Counts at most `cap` rows. COUNT(*) over millions of samples is a full scan on every page
    view; an operator only needs to know that there are more than a few hundred pages."""

    cap = 10_000

    @cached_property
    def count(self) -> int:
        if not isinstance(self.object_list, QuerySet):
            return len(self.object_list)
        # Counting a sliced queryset is COUNT(*) over a LIMITed subquery: bounded work.
        return self.object_list[: self.cap + 1].count()

    @property
    def capped(self) -> bool:
        return self.count > self.cap


class HistoryAdmin(admin.ModelAdmin):
    """History is append-only: nobody adds, edits or deletes it from the console."""

    paginator = CappedCountPaginator
    show_full_result_count = False  # the unfiltered total would COUNT(*) the whole table
    list_per_page = 50

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class HistoryInline(admin.TabularInline):
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def admin_link(obj: models.Model, label: object = None) -> SafeString:
    opts = obj._meta
    url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])
    return format_html('<a href="{}">{}</a>', url, obj if label is None else label)


def samples_url(**filters: object) -> str:
    query = "&".join(f"{key}={value}" for key, value in filters.items())
    return f"{reverse('admin:sampling_sample_changelist')}?{query}"


def pretty_json(value: Any) -> SafeString:
    """Snapshots hold operator-typed and upstream text: always escaped, never marked safe."""
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
    return format_html('<pre class="geo-json">{}</pre>', text)


def answer_html(text: str) -> SafeString:
    """Upstream answers are untrusted HTML/Markdown: shown escaped, as plain text."""
    if not text:
        return format_html('<span class="geo-muted">{}</span>', "(no answer text)")
    return format_html('<div class="geo-answer">{}</div>', text)


def _safe_href(url: str) -> str | None:
    return url if url.lower().startswith(("https://", "http://")) else None


def evidence_objects_html(capture: Capture) -> SafeString:
    rows = format_html_join(
        "",
        "<tr><td>{}</td><td><code>{}</code></td><td><code>{}</code></td><td>{}</td>"
        "<td>{}</td></tr>",
        ((o.kind, o.key, o.sha256, o.size, o.mime) for o in capture.evidence_objects.all()),
    )
    if not rows:
        return format_html('<span class="geo-muted">{}</span>', "no stored objects")
    return format_html(
        '<table class="geo-table"><thead><tr><th>kind</th><th>key</th><th>sha256</th>'
        "<th>bytes</th><th>MIME</th></tr></thead><tbody>{}</tbody></table>",
        rows,
    )


def citations_html(capture: Capture) -> SafeString:
    items = []
    for c in capture.citations.all():
        href = _safe_href(c.url)
        url = (
            format_html('<a href="{}" rel="noopener noreferrer nofollow">{}</a>', href, c.url)
            if href
            else format_html("<code>{}</code>", c.url)
        )
        span = "–" if c.start is None else f"{c.start}–{c.end}"
        items.append((c.position, url, c.normalized_url, c.domain, c.title, span))
    if not items:
        return format_html('<span class="geo-muted">{}</span>', "no citations")
    rows = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
        items,
    )
    return format_html(
        '<table class="geo-table"><thead><tr><th>#</th><th>URL</th><th>normalized</th>'
        "<th>domain</th><th>title</th><th>span</th></tr></thead><tbody>{}</tbody></table>",
        rows,
    )


def outcome_badge(status: Status) -> SafeString:
    return format_html(
        '<span class="geo-badge geo-{}">{}</span>',
        status.outcome.value,
        OUTCOME_LABELS[status.outcome],
    )


def status_context(status: Status) -> dict[str, Any]:
    """What templates/admin/sampling/_status.html needs, all derived from one Status."""
    planned = max(status.planned, 1)
    counts = {name: getattr(status, name) for name in STATUS_SEGMENTS}
    return {
        "status": status,
        "outcome_label": OUTCOME_LABELS[status.outcome],
        "counts": counts,
        "segments": [
            {"name": name, "count": n, "width": f"{100 * n / planned:.2f}"}
            for name, n in counts.items()
            if n
        ],
        "percent_terminal": f"{100 * status.terminal / planned:.0f}",
    }


# --- tenants and brands ---------------------------------------------------------------------


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "max_concurrency", "created_at")
    search_fields = ("slug", "name")
    fields = ("slug", "name", "max_concurrency")


class LinesField(forms.Field):
    """A JSON list of strings (aliases, domains) edited as one item per line."""

    widget = forms.Textarea(attrs={"rows": 3, "cols": 28})

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        kwargs.setdefault("help_text", "One per line.")
        super().__init__(**kwargs)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list):
            return "\n".join(str(item) for item in value)
        return value

    def to_python(self, value: Any) -> list[str]:
        if isinstance(value, list):
            return [str(item) for item in value]
        lines = (normalize_text(line) for line in str(value or "").splitlines())
        return list(dict.fromkeys(line for line in lines if line))


class EntityForm(forms.ModelForm):
    """Brand and competitor: a name with aliases and domains."""

    aliases = LinesField()
    domains = LinesField()


@admin.register(Brand)
class BrandAdmin(admin.ModelAdmin):
    form = EntityForm
    fields = ("tenant", "name", "aliases", "domains")
    list_display = ("name", "tenant", "alias_list", "domain_list")
    list_filter = ("tenant",)
    list_select_related = ("tenant",)
    search_fields = ("name",)

    @admin.display(description="aliases")
    def alias_list(self, brand: Brand) -> str:
        return ", ".join(brand.aliases)

    @admin.display(description="domains")
    def domain_list(self, brand: Brand) -> str:
        return ", ".join(brand.domains)


# --- campaigns ------------------------------------------------------------------------------


class BrandChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj: Any) -> str:
        return f"{obj.tenant.slug} / {obj.name}"


class CampaignForm(forms.ModelForm):
    class Meta:
        model = Campaign
        fields = ("tenant", "name", "brand", "repeats", "screenshot_policy", "priority")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        tenant, brand = cleaned.get("tenant"), cleaned.get("brand")
        if tenant is not None and brand is not None and brand.tenant_id != tenant.pk:
            self.add_error("brand", f"{brand.name} belongs to another tenant, not {tenant.slug}.")
        return cleaned


class QuestionForm(forms.ModelForm):
    """The text is not a column: saving a changed text makes a new QuestionRevision through
    `revise_question` (CampaignAdmin.save_formset); a revision is never edited."""

    text = forms.CharField(widget=forms.Textarea(attrs={"rows": 2, "cols": 70}))

    class Meta:
        model = Question
        fields = ("position", "is_active")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        revision = self.instance.current_revision if self.instance.pk else None
        if revision is not None:
            self.initial["text"] = revision.text

    def clean_text(self) -> str:
        text = normalize_text(self.cleaned_data["text"])
        if not text:
            raise ValidationError("A question cannot be empty.")
        limit = settings.GEO_MAX_QUESTION_CHARS
        if len(text) > limit:
            raise ValidationError(f"{len(text)} characters, over the {limit} limit.")
        return text


class CompetitorInline(admin.TabularInline):
    model = Competitor
    form = EntityForm
    fields = ("position", "name", "aliases", "domains")
    extra = 0


class PlatformTargetForm(forms.ModelForm):
    platform = forms.ChoiceField(choices=())

    class Meta:
        model = PlatformTarget
        fields = ("platform", "device", "region", "mode")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        platforms = known_platforms()
        current = self.instance.platform if self.instance.pk else ""
        if current and current not in platforms:
            platforms = [current, *platforms]  # keep an old value visible so it can be fixed
        field = cast(forms.ChoiceField, self.fields["platform"])
        field.choices = [("", "---------"), *((p, p) for p in platforms)]


class PlatformTargetInline(admin.TabularInline):
    model = PlatformTarget
    form = PlatformTargetForm
    extra = 0


class QuestionInline(admin.TabularInline):
    model = Question
    form = QuestionForm
    fields = ("position", "text", "is_active", "revision_no")
    readonly_fields = ("revision_no",)
    # Revisions are referenced by runs; a question is retired with is_active, never deleted.
    can_delete = False
    extra = 1

    def get_queryset(self, request: HttpRequest) -> QuerySet[Question]:
        return super().get_queryset(request).select_related("current_revision")

    @admin.display(description="revision")
    def revision_no(self, question: Question) -> str:
        revision = question.current_revision
        return f"r{revision.revision_no}" if revision else "–"


@admin.register(Campaign)
class CampaignAdmin(admin.ModelAdmin):
    form = CampaignForm
    inlines = (CompetitorInline, PlatformTargetInline, QuestionInline)
    list_display = (
        "name",
        "tenant",
        "brand",
        "active_questions",
        "repeats",
        "screenshot_policy",
        "priority",
        "updated_at",
        "preview_link",
    )
    list_filter = ("tenant", "screenshot_policy")
    list_select_related = ("tenant", "brand")
    search_fields = ("name", "brand__name")
    actions = ("preview_plan_action",)
    change_form_template = "admin/sampling/campaign/change_form.html"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Campaign]:
        return (
            super()
            .get_queryset(request)
            .annotate(active_question_count=Count("questions", filter=Q(questions__is_active=True)))
        )

    def formfield_for_foreignkey(
        self, db_field: models.ForeignKey[Any, Any], request: HttpRequest, **kwargs: Any
    ) -> Any:
        if db_field.name == "brand":
            kwargs["form_class"] = BrandChoiceField
            kwargs["queryset"] = Brand.objects.select_related("tenant").order_by(
                "tenant__slug", "name"
            )
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    @admin.display(description="questions", ordering="active_question_count")
    def active_questions(self, campaign: Campaign) -> int:
        return cast(int, getattr(campaign, "active_question_count", 0))

    @admin.display(description="plan")
    def preview_link(self, campaign: Campaign) -> SafeString:
        url = reverse("admin:sampling_campaign_preview", args=[campaign.pk])
        return format_html('<a href="{}">Preview plan</a>', url)

    @admin.action(description="Preview plan of the selected campaign")
    def preview_plan_action(
        self, request: HttpRequest, queryset: QuerySet[Campaign]
    ) -> HttpResponse | None:
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one campaign to preview.", messages.WARNING)
            return None
        return redirect("admin:sampling_campaign_preview", queryset.get().pk)

    def save_formset(self, request: HttpRequest, form: Any, formset: Any, change: bool) -> None:
        super().save_formset(request, form, formset, change)
        if formset.model is not Question:
            return
        for question_form in formset.forms:
            text = question_form.cleaned_data.get("text")
            if text and question_form.has_changed() and question_form.instance.pk is not None:
                revise_question(question=question_form.instance, text=text)

    # --- plan preview and launch --------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path(
                "<path:object_id>/preview/",
                wrap(self.preview_view),
                name="sampling_campaign_preview",
            ),
            path(
                "<path:object_id>/launch/",
                wrap(require_POST(self.launch_view)),
                name="sampling_campaign_launch",
            ),
            *super().get_urls(),
        ]

    def _campaign(self, request: HttpRequest, object_id: str) -> Campaign:
        campaign = self.get_object(request, unquote(object_id))
        if campaign is None:
            raise Http404("No such campaign.")
        return cast(Campaign, campaign)

    def preview_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        campaign = self._campaign(request, object_id)
        if not self.has_view_or_change_permission(request, campaign):
            raise PermissionDenied
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "campaign": campaign,
            "title": f"Plan preview: {campaign.name}",
        }
        for warning in ambiguity_warnings(campaign=campaign):
            messages.warning(request, warning)
        try:
            spec = campaign_as_spec(campaign=campaign)
        except PlanError as exc:
            context["problems"] = exc.problems
        else:
            context.update(_plan_context(spec))
            if self._can_launch(request, campaign):
                context["token"] = _issue_launch_token(
                    request, campaign_id=campaign.pk, plan=_plan_fingerprint(campaign)
                )
        return TemplateResponse(request, "admin/sampling/campaign/preview.html", context)

    def _can_launch(self, request: HttpRequest, campaign: Campaign) -> bool:
        return self.has_change_permission(request, campaign) and request.user.has_perm(
            "sampling.add_run"
        )

    def launch_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        campaign = self._campaign(request, object_id)
        if not self._can_launch(request, campaign):
            raise PermissionDenied
        preview_url = reverse("admin:sampling_campaign_preview", args=[campaign.pk])
        try:
            run, already = _launch_once(request, campaign, request.POST.get("token", ""))
        except _StalePreview as exc:
            messages.error(request, str(exc))
            return HttpResponseRedirect(preview_url)
        except PlanError as exc:
            for problem in exc.problems:
                messages.error(request, f"Not launched: {problem}")
            return HttpResponseRedirect(preview_url)
        except ValueError as exc:  # e.g. billing refuses the hold; nothing was written
            messages.error(request, f"Not launched: {exc}")
            return HttpResponseRedirect(preview_url)
        if already:
            messages.warning(
                request, "This preview was already confirmed; no second run was launched."
            )
        else:
            self.log_addition(request, run, f"Launched from the plan preview of {campaign}")
            messages.success(request, f"Launched {run} with {run.planned_samples} samples.")
        return redirect("admin:sampling_run_change", run.pk)


def _plan_context(spec: CampaignSpec) -> dict[str, Any]:
    plan = preview_plan(spec=spec)
    per_platform: dict[str, dict[str, Any]] = {}
    for target in spec.targets:
        row = per_platform.setdefault(
            target.platform, {"platform": target.platform, "targets": 0, "sizes": []}
        )
        row["targets"] += 1
    for platform, size in batch_sizes(spec):
        per_platform[platform]["sizes"].append(size)
    for row in per_platform.values():
        row["samples"] = sum(row["sizes"])
        row["batches"] = len(row["sizes"])
        row["limit"] = spec.submission_limits[row["platform"]]
    shown = 50
    return {
        "spec": spec,
        "plan": plan,
        "platform_rows": list(per_platform.values()),
        "batch_rows": [
            {"index": i, "platform": platform, "size": size}
            for i, (platform, size) in enumerate(
                zip(plan.batch_platforms[:shown], plan.batches[:shown], strict=True)
            )
        ],
        "batches_hidden": max(0, len(plan.batches) - shown),
    }


# One-time launch tokens. The preview page issues a token bound to the campaign and to a digest
# of the campaign as previewed; confirming consumes it. A second POST of the same form finds
# the token already used and lands on the run the first one launched.
_TOKENS_KEY = "geo_launch_tokens"
_TOKENS_KEPT = 20


class _StalePreview(Exception):
    pass


def _plan_fingerprint(campaign: Campaign) -> str:
    data = campaign_spec_data(campaign=campaign)
    blob = json.dumps(data, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _issue_launch_token(request: HttpRequest, *, campaign_id: int, plan: str) -> str:
    token = secrets.token_urlsafe(24)
    tokens = dict(request.session.get(_TOKENS_KEY, {}))
    tokens[token] = {"campaign": campaign_id, "plan": plan, "run": None}
    request.session[_TOKENS_KEY] = dict(list(tokens.items())[-_TOKENS_KEPT:])
    return token


def _locked_session_tokens(request: HttpRequest) -> dict[str, dict[str, Any]]:
    """The session's tokens as committed, with the session row locked until the transaction
    ends: two concurrent POSTs of one preview serialize here, and the second sees the first's
    run. Other session backends fall back to the copy loaded with the request."""
    session = request.session
    if isinstance(session, DbSessionStore) and session.session_key:
        row = (
            session.model.objects.select_for_update()
            .filter(session_key=session.session_key)
            .first()
        )
        data = session.decode(row.session_data) if row is not None else {}
        return dict(data.get(_TOKENS_KEY, {}))
    return dict(session.get(_TOKENS_KEY, {}))


def _launch_once(request: HttpRequest, campaign: Campaign, token: str) -> tuple[Run, bool]:
    """Launch the previewed plan at most once per token. Returns (run, already_launched)."""
    with transaction.atomic():
        # Lock order: campaign, then session. The campaign lock keeps an admin save from
        # slipping in between the fingerprint check and the snapshot launch_run takes.
        campaign = Campaign.objects.select_for_update().get(pk=campaign.pk)
        tokens = _locked_session_tokens(request)
        entry = tokens.get(token)
        if entry is None or entry.get("campaign") != campaign.pk:
            raise _StalePreview(
                "This preview has expired or belongs to another campaign; nothing was launched. "
                "Review the plan below and confirm again."
            )
        if entry.get("run"):
            return Run.objects.get(pk=UUID(entry["run"])), True
        if entry.get("plan") != _plan_fingerprint(campaign):
            raise _StalePreview(
                "The campaign changed after this preview; nothing was launched. "
                "Review the new plan below and confirm again."
            )
        run = launch_run(campaign=campaign)
        tokens[token] = {**entry, "run": str(run.pk)}
        request.session[_TOKENS_KEY] = tokens
        request.session.save()  # commits with the run, inside this transaction
    return run, False


# --- runs -----------------------------------------------------------------------------------

_STATUS_ATTR = "_console_status"


def _run_status(run: Run) -> Status:
    status = getattr(run, _STATUS_ATTR, None)
    if status is None:
        status = run_status(run_id=run.pk)
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


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
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
        "campaign",
        "created_at",
        "finished_at",
        "cancelled_at",
        "planned_samples",
        "priority",
        "samples_link",
        "config",
        "quote",
    )
    readonly_fields = fields
    change_form_template = "admin/sampling/run/change_form.html"

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

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return RunChangeList

    @admin.display(description="run", ordering="id")
    def short_id(self, run: Run) -> str:
        return str(run.pk)[:8]

    @admin.display(description="campaign", ordering="campaign__name")
    def campaign_name(self, run: Run) -> str:
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

    @admin.display(description="samples")
    def samples_link(self, run: Run) -> SafeString:
        return format_html(
            '<a href="{}">View the {} samples of this run</a>',
            samples_url(run=run.pk),
            run.planned_samples,
        )

    @admin.display(description="config snapshot (frozen at launch)")
    def config(self, run: Run) -> SafeString:
        return pretty_json(run.config_snapshot)

    @admin.display(description="quote snapshot")
    def quote(self, run: Run) -> SafeString:
        if run.quote_snapshot is None:
            return format_html('<span class="geo-muted">{}</span>', "no quote recorded")
        return pretty_json(run.quote_snapshot)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        run = self.get_object(request, unquote(object_id))
        if run is not None:
            extra_context = {**(extra_context or {}), **_run_detail_context(request, run)}
        return super().change_view(request, object_id, form_url, extra_context)


def _run_detail_context(request: HttpRequest, run: Run) -> dict[str, Any]:
    status = run_status(run_id=run.pk)
    layers = [
        {
            "name": layer,
            "states": [(state, status.layers.get(layer, {}).get(state, 0)) for state in states],
        }
        for layer, states in LAYER_STATES.items()
    ]
    page = Paginator(run.batches.order_by("index"), 25).get_page(request.GET.get("batch_page"))
    batch_rows = []
    for batch in page.object_list:
        batch_state = batch_status(batch=batch)
        batch_rows.append(
            {
                "batch": batch,
                "samples_url": samples_url(batch=batch.pk),
                **status_context(batch_state),
            }
        )
    return {
        **status_context(status),
        "layers": layers,
        "batch_page": page,
        "batch_rows": batch_rows,
        "run_samples_url": samples_url(run=run.pk),
    }


# --- samples --------------------------------------------------------------------------------


class RunSampleFilter(admin.SimpleListFilter):
    """By run, without listing every run ever made: the selected run and the latest few."""

    title = "run"
    parameter_name = "run"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        runs = list(Run.objects.select_related("campaign").order_by("-created_at")[:10])
        selected = _uuid_or_none(self.value() or "")
        if selected is not None and all(run.pk != selected for run in runs):
            runs.extend(Run.objects.select_related("campaign").filter(pk=selected))
        return [(str(run.pk), f"{str(run.pk)[:8]} · {run.campaign.name}") for run in runs]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value():
            return queryset.filter(run_id=_uuid_or_none(self.value() or ""))
        return queryset


def _uuid_or_none(value: str) -> UUID | None:
    try:
        return UUID(value)
    except ValueError:
        return None


class BatchSampleFilter(admin.SimpleListFilter):
    """Reached from a run's batch table; shown only while active."""

    title = "batch"
    parameter_name = "batch"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        batch = Batch.objects.filter(pk=value).first() if value and value.isdigit() else None
        return [(str(batch.pk), str(batch))] if batch else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value:
            return queryset.filter(batch_id=int(value) if value.isdigit() else 0)
        return queryset


class PlatformFilter(admin.SimpleListFilter):
    """Choices from the connector registry: no DISTINCT scan over the samples table."""

    title = "platform"
    parameter_name = "platform"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(p, p) for p in known_platforms()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.filter(platform=self.value()) if self.value() else queryset


class ValidityFilter(admin.SimpleListFilter):
    title = "validity"
    parameter_name = "validity"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("valid", "valid"), ("invalid", "invalid"), ("unset", "not checked yet")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == "unset":
            return queryset.filter(validity="")
        return queryset.filter(validity=value) if value else queryset


class AttemptInline(HistoryInline):
    model = Attempt
    fields = (
        "attempt_no",
        "status",
        "error_class",
        "status_code",
        "error_message",
        "upstream_id",
        "request_id",
        "egress",
        "retry_after_seconds",
        "fencing_token",
        "started_at",
        "finished_at",
    )


class CaptureInline(admin.StackedInline):
    model = Capture
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = True
    fields = (
        ("revision", "attempt_no", "collection_state", "status_code"),
        ("upstream_id", "captured_at", "upstream_cost", "upstream_cost_currency"),
        "warnings",
        "error",
        "answer",
        "stored_objects",
        "citation_list",
    )
    readonly_fields = ("answer", "stored_objects", "citation_list")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Capture]:
        return super().get_queryset(request).prefetch_related("evidence_objects", "citations")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="answer text (escaped)")
    def answer(self, capture: Capture) -> SafeString:
        return answer_html(capture.answer_text)

    @admin.display(description="evidence objects")
    def stored_objects(self, capture: Capture) -> SafeString:
        return evidence_objects_html(capture)

    @admin.display(description="citations")
    def citation_list(self, capture: Capture) -> SafeString:
        return citations_html(capture)


class MentionInline(HistoryInline):
    model = Mention
    fields = ("revision", "entity", "context", "mentioned", "sentiment", "rank", "capture")
    show_change_link = False


class StaleWriteInline(HistoryInline):
    model = StaleWrite
    fields = ("operation", "presented_token", "current_token", "worker", "created_at")
    show_change_link = False


@admin.register(Sample)
class SampleAdmin(HistoryAdmin):
    list_display = (
        "id",
        "run_short",
        "question",
        "platform",
        "device",
        "region",
        "mode",
        "repeat_index",
        "submission_state",
        "collection_state",
        "evidence_state",
        "analysis_state",
        "queue_state",
        "validity",
        "updated_at",
    )
    list_select_related = ("question_revision",)
    list_filter = (
        RunSampleFilter,
        BatchSampleFilter,
        PlatformFilter,
        "submission_state",
        "collection_state",
        "evidence_state",
        "analysis_state",
        "queue_state",
        ValidityFilter,
    )
    ordering = ("-id",)
    inlines = (AttemptInline, CaptureInline, MentionInline, StaleWriteInline)
    change_form_template = "admin/sampling/sample/change_form.html"
    change_list_template = "admin/sampling/sample/change_list.html"
    fieldsets = (
        (
            "Identity",
            {
                "fields": (
                    "run_link",
                    "batch",
                    "tenant",
                    "question_text",
                    ("platform", "device", "region", "mode", "repeat_index"),
                )
            },
        ),
        (
            "State",
            {
                "fields": (
                    ("submission_state", "collection_state", "evidence_state", "analysis_state"),
                    "brand_mention",
                    ("validity", "validity_reason"),
                    "evidence_reason",
                    "failure_reason",
                )
            },
        ),
        (
            "Execution",
            {
                "fields": (
                    ("step", "queue_state", "priority", "due_at"),
                    ("lease_owner", "lease_until", "fencing_token"),
                    ("attempts", "claims"),
                    ("upstream_id", "accepted_at", "completed_at", "updated_at"),
                )
            },
        ),
    )
    readonly_fields = ("run_link", "question_text", "brand_mention")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Sample]:
        return super().get_queryset(request).select_related("question_revision")

    @admin.display(description="run", ordering="run_id")
    def run_short(self, sample: Sample) -> str:
        return str(sample.run_id)[:8]

    @admin.display(description="question")
    def question(self, sample: Sample) -> str:
        revision = sample.question_revision
        text = revision.text
        return f"r{revision.revision_no} {text[:50]}{'…' if len(text) > 50 else ''}"

    @admin.display(description="run")
    def run_link(self, sample: Sample) -> SafeString:
        return admin_link(sample.run)

    @admin.display(description="question revision")
    def question_text(self, sample: Sample) -> str:
        revision = sample.question_revision
        return f"r{revision.revision_no} (question {revision.question_id}): {revision.text}"

    @admin.display(description="brand mentioned")
    def brand_mention(self, sample: Sample) -> str:
        # While analysis is pending nothing is known yet: say so, never "not mentioned".
        if sample.analysis_state == AnalysisState.PENDING:
            return "analysing"
        brand = sample.mentions.filter(is_brand=True).order_by("-capture__revision").first()
        if brand is None:
            return f"no analysis recorded ({sample.analysis_state})"
        if not brand.mentioned:
            return f"not mentioned ({sample.analysis_state})"
        return (
            f"mentioned {brand.count}×, first at {brand.first_position} ({sample.analysis_state})"
        )


# --- other execution history ----------------------------------------------------------------


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
