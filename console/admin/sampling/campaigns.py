"""Campaigns: the form (targets as choices from each platform's capabilities, questions in
order), the plan preview with its quote and balance, and the launch (pipeline.preview)."""

from __future__ import annotations

from functools import cache
from typing import Any, cast

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count, Max, Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from analysis.selectors import ambiguity_warnings
from billing.services import BillingError
from connectors.base import Capabilities
from connectors.registry import available_platforms, get_connector
from console.admin_base import CappedCountPaginator, ScopedInline, TenantScopedAdmin
from console.dashboard import DashboardFilters, Filters, dashboard_context
from console.widgets import money, plural
from pipeline.preview import (
    LaunchPreview,
    StalePreview,
    issue_launch_token,
    launch_once,
    preview_campaign,
)
from sampling.models import Campaign, Competitor, PlatformTarget, Question
from sampling.planning import (
    TOPIC_MAX,
    PlanError,
    as_typed,
    batch_sizes,
    priority_problem,
    question_key,
    repeats_problem,
)
from sampling.services import revise_question
from sampling.snapshots import Quote
from tenancy.scope import allows_on, scoped_by

from .brands import EntityForm
from .campaign_check import CampaignCheck, CheckedFormSet


def _refuse(problem: str) -> None:
    if problem:
        raise ValidationError(problem[:1].upper() + problem[1:] + ".")


class CampaignForm(forms.ModelForm):
    """The campaign's own fields, held to the plan preview's rules (sampling/planning.py);
    its questions and targets are checked with them as a whole (campaign_check.py)."""

    class Meta:
        model = Campaign
        fields = ("tenant", "name", "brand", "repeats", "screenshot_policy", "priority")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._brands_of_the_tenant()

    def _brands_of_the_tenant(self) -> None:
        """The brand list narrowed to the campaign's tenant when it is known (a saved
        campaign, or `?tenant=` on the add page, or the only tenant offered). The choices
        were already scoped to the user's tenants (console.admin_base, tenancy.scope); a
        posted brand of another tenant is refused by `clean`, naming the tenant."""
        brand, tenant = self.fields.get("brand"), self.fields.get("tenant")
        if brand is None or self.is_bound:
            return
        tenant_id = self.instance.tenant_id or self.initial.get("tenant")
        if tenant_id is None and tenant is not None:
            offered = list(cast(Any, tenant).queryset.values_list("pk", flat=True)[:2])
            tenant_id = offered[0] if len(offered) == 1 else None
        if tenant_id is not None:
            field = cast(Any, brand)
            field.queryset = field.queryset.filter(tenant_id=tenant_id)

    def clean_repeats(self) -> Any:
        _refuse(repeats_problem(self.cleaned_data.get("repeats")))
        return self.cleaned_data.get("repeats")

    def clean_priority(self) -> Any:
        _refuse(priority_problem(self.cleaned_data.get("priority")))
        return self.cleaned_data.get("priority")

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
    topics = forms.CharField(
        required=False,
        max_length=2000,
        help_text="Topics (tags), separated by commas; each run freezes them.",
    )

    class Meta:
        model = Question
        fields = ("position", "is_active", "topics")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["position"].required = False
        self.fields["position"].help_text = "Empty: after the existing questions."
        revision = self.instance.current_revision if self.instance.pk else None
        if revision is not None:
            self.initial["text"] = revision.text
        else:
            self.initial["position"] = None
        self.initial["topics"] = ", ".join(self.instance.topics or [])

    def clean_topics(self) -> list[str]:
        """The campaign file's rules (sampling/planning.py `_topics`): names of 1 to
        TOPIC_MAX characters, spaces folded, each once."""
        kept: list[str] = []
        for raw in (self.cleaned_data.get("topics") or "").split(","):
            topic = " ".join(raw.split())
            if not topic:
                continue
            if len(topic) > TOPIC_MAX:
                raise ValidationError(f"A topic is at most {TOPIC_MAX} characters.")
            if topic not in kept:
                kept.append(topic)
        return kept

    def clean_text(self) -> str:
        text = as_typed(self.cleaned_data["text"])  # asked as typed: "？" stays "？"
        if not text:
            raise ValidationError("A question cannot be empty.")
        limit = settings.GEO_MAX_QUESTION_CHARS
        if len(text) > limit:
            raise ValidationError(f"{len(text)} characters, over the {limit} limit.")
        return text


class QuestionListForm(QuestionForm):
    """One question edited in the question list: the same question twice in a campaign is
    refused here too (compared by `question_key`, as on the campaign page)."""

    class Meta(QuestionForm.Meta):
        fields: tuple[str, ...] = ("campaign", "position", "is_active", "topics")  # type: ignore[assignment]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        campaign, text = cleaned.get("campaign"), cleaned.get("text")
        if campaign is None or not text or not cleaned.get("is_active"):
            return cleaned
        others = campaign.questions.filter(is_active=True).select_related("current_revision")
        if self.instance.pk is not None:
            others = others.exclude(pk=self.instance.pk)
        key = question_key(text)
        for other in others:
            revision = other.current_revision
            if revision is not None and question_key(revision.text) == key:
                self.add_error(
                    "text",
                    f"The same question as {revision.text[:80]!r} (position {other.position}; "
                    "compared ignoring spaces, full-width characters and letter case).",
                )
                break
        return cleaned


class CompetitorInline(ScopedInline):
    model = Competitor
    form = EntityForm
    fields = ("position", "name", "aliases", "domains")
    extra = 0


@cache
def _capabilities(platform: str) -> Capabilities:
    return get_connector(platform).capabilities()


def _choices(values: set[str]) -> list[tuple[str, str]]:
    return [("", "---------"), *((v, v) for v in sorted(values))]


class PlatformTargetForm(forms.ModelForm):
    """Choices offered are every value some platform supports; the combination is checked
    against the chosen platform's capabilities, naming the target (not a row index)."""

    platform = forms.ChoiceField(choices=())
    device = forms.ChoiceField(choices=())
    region = forms.ChoiceField(choices=())
    mode = forms.ChoiceField(choices=())
    language = forms.ChoiceField(choices=(), required=False)

    class Meta:
        model = PlatformTarget
        fields = ("platform", "device", "region", "mode", "language")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        platforms = available_platforms()
        caps = [_capabilities(p) for p in platforms]
        values = {
            "platform": set(platforms),
            "device": {d for c in caps for d in c.devices},
            "region": {r for c in caps for r in c.regions},
            "mode": {m for c in caps for m in c.modes},
            "language": {language for c in caps for language in c.languages},
        }
        for name, allowed in values.items():
            current = getattr(self.instance, name) if self.instance.pk else ""
            if current:
                allowed = allowed | {current}  # keep an old value visible so it can be fixed
            cast(forms.ChoiceField, self.fields[name]).choices = _choices(allowed)

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        platform = cleaned.get("platform")
        parts = [cleaned.get(k) for k in ("device", "region", "mode")]
        if platform not in available_platforms() or not all(parts):
            return cleaned
        device, region, mode = (str(p) for p in parts)
        language = str(cleaned.get("language") or "")
        problems = _capabilities(platform).problems(
            device=device, region=region, mode=mode, screenshot_policy="optional",
            language=language,
        )  # fmt: skip
        if problems:
            target = " / ".join(p for p in (platform, device, region, mode, language) if p)
            raise ValidationError([f"Target {target}: {problem}." for problem in problems])
        return cleaned


class PlatformTargetInline(ScopedInline):
    model = PlatformTarget
    form = PlatformTargetForm
    formset = CheckedFormSet
    extra = 0


class QuestionInline(ScopedInline):
    model = Question
    form = QuestionForm
    formset = CheckedFormSet
    fields = ("position", "text", "topics", "is_active", "revision_no")
    readonly_fields = ("revision_no",)
    ordering = ("position", "id")
    # Revisions are referenced by runs; a question is retired with is_active, never deleted.
    can_delete = False
    extra = 1

    def get_queryset(self, request: HttpRequest) -> QuerySet[Question]:
        return super().get_queryset(request).select_related("current_revision")

    @admin.display(description="revision")
    def revision_no(self, question: Question) -> str:
        revision = question.current_revision
        return f"r{revision.revision_no}" if revision else "–"


def _many_questions(campaign: Campaign) -> bool:
    """More than QUESTION_INLINE_LIMIT questions (counts at most LIMIT + 1 rows)."""
    return campaign.questions.all()[: QUESTION_INLINE_LIMIT + 1].count() > QUESTION_INLINE_LIMIT


def _place_new_questions(campaign: Campaign, forms_: list[Any]) -> None:
    """New rows without a position go after the existing questions, in the order typed."""
    last = campaign.questions.aggregate(m=Max("position"))["m"]
    next_position = -1 if last is None else last
    for form in forms_:
        if form.instance.pk is None and form.cleaned_data.get("position") is None:
            next_position += 1
            form.instance.position = next_position


# Above this many questions the campaign page does not render one form per question (10,000
# forms take seconds): they are listed, paginated, and edited in the question list.
QUESTION_INLINE_LIMIT = 100


def _save_question_text(question: Question, form: Any) -> None:
    text = form.cleaned_data.get("text")
    if text and form.has_changed() and question.pk is not None:
        revise_question(question=question, text=text)


@admin.register(Question)
class QuestionAdmin(TenantScopedAdmin):
    """A campaign's questions in their own paginated list (large campaigns); editing the text
    makes a new revision, as on the campaign page."""

    form = QuestionListForm
    fields = ("campaign", "position", "text", "topics", "is_active")
    list_display = (
        "position",
        "question_text",
        "topic_names",
        "revision_no",
        "is_active",
        "campaign",
    )
    list_display_links = ("position", "question_text")
    list_filter = ("campaign", "is_active")
    list_select_related = ("current_revision", "campaign")
    search_fields = ("current_revision__text",)
    ordering = ("campaign", "position", "id")
    list_per_page = 100
    paginator = CappedCountPaginator
    show_full_result_count = False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # runs reference revisions: retire a question with is_active

    @admin.display(description="question")
    def question_text(self, question: Question) -> str:
        revision = question.current_revision
        return revision.text[:120] if revision else "–"

    @admin.display(description="topics")
    def topic_names(self, question: Question) -> str:
        return ", ".join(question.topics or []) or "–"

    @admin.display(description="revision")
    def revision_no(self, question: Question) -> str:
        revision = question.current_revision
        return f"r{revision.revision_no}" if revision else "–"

    def save_model(self, request: HttpRequest, obj: Question, form: Any, change: bool) -> None:
        if obj.position is None:
            last = obj.campaign.questions.aggregate(m=Max("position"))["m"]
            obj.position = 0 if last is None else last + 1
        super().save_model(request, obj, form, change)
        _save_question_text(obj, form)


@admin.register(Campaign)
class CampaignAdmin(TenantScopedAdmin):
    form = CampaignForm
    list_display = (
        "name",
        "tenant",
        "brand",
        "active_questions",
        "repeats",
        "screenshot_policy",
        "priority",
        "updated_at",
        "runs_link",
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
            .annotate(
                active_question_count=Count(
                    "questions", filter=Q(questions__is_active=True), distinct=True
                ),
                run_count=Count("runs", distinct=True),
            )
        )

    @admin.display(description="questions", ordering="active_question_count")
    def active_questions(self, campaign: Campaign) -> int:
        return cast(int, getattr(campaign, "active_question_count", 0))

    @admin.display(description="runs", ordering="run_count")
    def runs_link(self, campaign: Campaign) -> SafeString:
        url = reverse("admin:sampling_run_changelist") + f"?campaign__id__exact={campaign.pk}"
        return format_html(
            '<a href="{}">{}</a>', url, plural(getattr(campaign, "run_count", 0), "run")
        )

    @admin.display(description="plan")
    def preview_link(self, campaign: Campaign) -> SafeString:
        url = reverse("admin:sampling_campaign_preview", args=[campaign.pk])
        return format_html('<a href="{}">Preview plan</a>', url)

    @admin.action(description="Preview plan of the selected campaign", permissions=["view"])
    def preview_plan_action(
        self, request: HttpRequest, queryset: QuerySet[Campaign]
    ) -> HttpResponse | None:
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one campaign to preview.", messages.WARNING)
            return None
        return redirect("admin:sampling_campaign_preview", queryset.get().pk)

    def save_formset(self, request: HttpRequest, form: Any, formset: Any, change: bool) -> None:
        if formset.model is Question:
            _place_new_questions(form.instance, formset.forms)
        super().save_formset(request, form, formset, change)
        if formset.model is not Question:
            return
        for question_form in formset.forms:
            _save_question_text(question_form.instance, question_form)

    def _create_formsets(self, request: HttpRequest, obj: Any, change: bool) -> Any:
        """The page's last formset checks the whole campaign once the others are cleaned
        (campaign_check.py): Django offers no hook across a page's forms."""
        formsets, inlines = super()._create_formsets(request, obj, change)  # type: ignore[misc]
        if request.method == "POST" and formsets and isinstance(formsets[-1], CheckedFormSet):
            formsets[-1].whole_campaign = CampaignCheck(obj, formsets)
        return formsets, inlines

    def get_inlines(self, request: HttpRequest, obj: Any) -> list[type[Any]]:
        if obj is not None and _many_questions(obj):
            return [CompetitorInline, PlatformTargetInline]
        return [CompetitorInline, PlatformTargetInline, QuestionInline]

    def change_view_context(self, request: HttpRequest, obj: Any) -> dict[str, Any]:
        runs_url = reverse("admin:sampling_run_changelist") + f"?campaign__id__exact={obj.pk}"
        questions_url = (
            reverse("admin:sampling_question_changelist") + f"?campaign__id__exact={obj.pk}"
        )
        return {
            "dashboard_url": dashboard_url(obj.pk, request.user, obj),
            "campaign_runs": obj.runs.order_by("-created_at")[:10],
            "campaign_runs_url": runs_url,
            "questions_listed_apart": _many_questions(obj),
            "questions_url": questions_url,
        }

    # --- plan preview and launch --------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        return [
            self.object_url("dashboard", self.dashboard_view),
            self.object_url("preview", self.preview_view),
            self.object_url("launch", self.launch_view, post_only=True),
            *super().get_urls(),
        ]

    # --- the monitoring dashboard -------------------------------------------------------

    def dashboard_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The campaign over time (console/dashboard.py), for whoever may read its samples
        (operators and analysts; finance: 403). Analysts hold no campaign permission, so the
        campaign is looked up among the tenants of any role of theirs: another tenant's
        campaign is a 404 as everywhere."""
        campaign = _dashboard_campaign_or_404(request, object_id)
        if not allows_on(request.user, "sampling.view_sample", campaign):
            raise PermissionDenied
        form = DashboardFilters(request.GET, campaign=campaign)
        filters = Filters.from_form(form, today=timezone.now().date())
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "campaign": campaign,
            "title": f"Dashboard: {campaign.name}",
            "form": form,
            "filters": filters,
            "campaign_url": reverse("admin:sampling_campaign_change", args=[campaign.pk])
            if self.has_view_or_change_permission(request, campaign)
            else "",
            **dashboard_context(campaign, filters),
        }
        return TemplateResponse(request, "admin/sampling/campaign/dashboard.html", context)

    def preview_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        campaign = cast(Campaign, self._scoped_object_or_404(request, object_id))
        if not self.has_view_or_change_permission(request, campaign):
            raise PermissionDenied
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "campaign": campaign,
            "title": f"Plan preview: {campaign.name}",
            "latest_run": campaign.runs.order_by("-created_at").first(),
        }
        for warning in ambiguity_warnings(campaign=campaign):
            messages.warning(request, warning)
        try:
            preview = preview_campaign(campaign=campaign)
        except PlanError as exc:
            context["problems"] = exc.problems
        else:
            context.update(_plan_context(preview))
            if preview.can_launch and self._can_launch(request, campaign):
                assert preview.quote is not None
                context["token"] = issue_launch_token(
                    request.session, campaign=campaign, quote=preview.quote
                )
        return TemplateResponse(request, "admin/sampling/campaign/preview.html", context)

    def _can_launch(self, request: HttpRequest, campaign: Campaign) -> bool:
        return self.has_change_permission(request, campaign) and self.role_allows(
            request, "sampling.add_run", campaign
        )

    def launch_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        campaign = cast(Campaign, self._scoped_object_or_404(request, object_id))
        if not self._can_launch(request, campaign):
            raise PermissionDenied
        preview_url = reverse("admin:sampling_campaign_preview", args=[campaign.pk])
        try:
            run, already = launch_once(
                request.session, campaign=campaign, token=request.POST.get("token", "")
            )
        except StalePreview as exc:
            messages.error(request, str(exc))
            return HttpResponseRedirect(preview_url)
        except PlanError as exc:
            for problem in exc.problems:
                messages.error(request, f"Not launched: {problem}")
            return HttpResponseRedirect(preview_url)
        except BillingError as exc:  # e.g. funds short; nothing was written
            messages.error(request, f"Not launched: {exc}")
            return HttpResponseRedirect(preview_url)
        if already:
            messages.error(
                request,
                "This preview was already launched (this run); no second run was launched. "
                "To launch again, open a new preview.",
            )
        else:
            self.log_addition(request, run, f"Launched from the plan preview of {campaign}")
            messages.success(
                request, f"Launched {run} with {plural(run.planned_samples, 'sample')}."
            )
        return redirect("admin:sampling_run_change", run.pk)


def _dashboard_campaign_or_404(request: HttpRequest, object_id: str) -> Campaign:
    visible = scoped_by(
        Campaign.objects.select_related("brand", "tenant"), request.user, "tenancy.view_tenant"
    )
    campaign = visible.filter(pk=int(object_id) if object_id.isdigit() else 0).first()
    if campaign is None:
        raise Http404("no such campaign")
    return campaign


def dashboard_url(campaign_id: int, user: Any, campaign: Any) -> str:
    """The dashboard's address for whoever may read `campaign`'s samples, else ""."""
    if not allows_on(user, "sampling.view_sample", campaign):
        return ""
    return reverse("admin:sampling_campaign_dashboard", args=[campaign_id])


def _plan_context(preview: LaunchPreview) -> dict[str, Any]:
    spec, plan = preview.spec, preview.plan
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
        "preview": preview,
        "quote_lines": _quote_lines(preview.quote),
        "platform_rows": list(per_platform.values()),
        "batch_rows": [
            {"index": i, "platform": platform, "size": size}
            for i, (platform, size) in enumerate(
                zip(plan.batch_platforms[:shown], plan.batches[:shown], strict=True)
            )
        ],
        "batches_hidden": max(0, len(plan.batches) - shown),
    }


def _quote_lines(quote: Quote | None) -> list[dict[str, Any]]:
    if quote is None:
        return []
    currency = quote.currency
    return [
        {
            **line.to_json(),
            "target_text": line.target.replace("|", " / "),
            "unit_price_text": money(line.unit_price, currency),
            "amount_text": money(line.amount, currency),
            "components": ", ".join(
                f"{name} {money(amount, currency)}"
                for name, amount in quote.unit_prices.get(line.platform, {}).items()
            ),
        }
        for line in quote.lines
    ]
