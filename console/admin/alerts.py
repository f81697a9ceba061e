"""Alerts in the console, scoped like every page (console/admin_base.py): operators and
analysts list and acknowledge their tenants' alerts, each with its figures and the links to
the samples behind them; operators set the campaign's rules and the subscriptions, and read
the deliveries. A rule's Slack URL is a secret: never listed, shown masked, kept when the
field is left empty."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html_join
from django.utils.safestring import SafeString, mark_safe

from alerts.delivery import figure_lines
from alerts.models import Alert, AlertDelivery, AlertRule, AlertSubscription
from alerts.services import NotAcknowledgeable, acknowledge
from connectors.outbound import OutboundRefused, check_url
from console.admin_base import TenantScopedAdmin


@admin.register(Alert)
class AlertAdmin(TenantScopedAdmin):
    list_display = ("summary", "state", "kind", "campaign", "fired_at", "acknowledged_by")
    list_filter = ("state", "rule__kind", "campaign")
    list_select_related = ("rule", "campaign", "acknowledged_by")
    search_fields = ("summary", "condition_key")
    date_hierarchy = "fired_at"
    fields = (
        "summary", "state", "kind", "campaign", "condition_key", "figures", "samples", "run",
        "last_run", "fired_at", "acknowledged_at", "acknowledged_by", "resolved_at",
        "resolved_run", "resolution", "details",
    )  # fmt: skip
    readonly_fields = fields
    actions = ("acknowledge_selected",)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="kind", ordering="rule__kind")
    def kind(self, obj: Alert) -> str:
        return obj.rule.get_kind_display()

    @admin.display(description="before / after")
    def figures(self, obj: Alert) -> SafeString:
        return format_html_join(mark_safe("<br>"), "{}", ((line,) for line in figure_lines(obj)))

    def change_view_context(self, request: HttpRequest, obj: Any) -> dict[str, Any]:
        # Every field is read-only: the page offers what can be done (acknowledge, from the
        # list's action), not a Save that would change nothing.
        return {"show_save": False, "show_save_and_continue": False}

    @admin.display(description="samples")
    def samples(self, obj: Alert) -> SafeString:
        links = obj.details.get("links", [])
        return format_html_join(
            mark_safe("<br>"),
            '<a href="{}">{}</a>',
            ((link["url"], link["label"]) for link in links),
        )

    @admin.action(description="Acknowledge the selected alerts", permissions=["change"])
    def acknowledge_selected(self, request: HttpRequest, queryset: QuerySet[Alert]) -> None:
        done, skipped = 0, 0
        for alert in queryset:
            try:
                acknowledge(alert=alert, user=request.user)
                done += 1
            except NotAcknowledgeable:
                skipped += 1
        text = f"{done} alert(s) acknowledged" + (f"; {skipped} not open" if skipped else "")
        self.message_user(request, text, messages.SUCCESS)


MASK = "•••• (set; leave empty to keep)"


class AlertRuleForm(forms.ModelForm):
    slack_webhook_url = forms.CharField(
        max_length=500,
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="a Slack incoming webhook (https://hooks.slack.com/…); empty keeps the current",
    )
    clear_slack = forms.BooleanField(required=False, help_text="remove the Slack webhook")

    class Meta:
        model = AlertRule
        fields = (
            "campaign", "kind", "window", "baseline_runs", "params", "email",
            "slack_webhook_url", "webhooks", "active",
        )  # fmt: skip

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk and self.instance.slack_webhook_url:
            self.fields["slack_webhook_url"].widget.attrs["placeholder"] = MASK

    def clean_slack_webhook_url(self) -> str:
        given = str(self.cleaned_data.get("slack_webhook_url") or "").strip()
        if not given:
            return str(self.instance.slack_webhook_url or "") if self.instance.pk else ""
        try:
            check_url(given)
        except OutboundRefused as error:
            raise forms.ValidationError(str(error).removeprefix("url: ")) from None
        return given

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        if cleaned.get("clear_slack"):
            cleaned["slack_webhook_url"] = ""
        return cleaned


@admin.register(AlertRule)
class AlertRuleAdmin(TenantScopedAdmin):
    form = AlertRuleForm
    list_display = ("campaign", "kind", "window", "email", "slack", "webhooks", "active")
    list_filter = ("kind", "active")
    list_select_related = ("campaign",)

    @admin.display(description="Slack", boolean=True)
    def slack(self, obj: AlertRule) -> bool:
        return bool(obj.slack_webhook_url)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        obj.tenant_id = obj.campaign.tenant_id  # a rule belongs to its campaign's tenant
        super().save_model(request, obj, form, change)


@admin.register(AlertSubscription)
class AlertSubscriptionAdmin(TenantScopedAdmin):
    list_display = ("user", "tenant", "immediate", "daily_digest", "time_zone", "digest_hour")
    list_filter = ("tenant", "immediate", "daily_digest")
    list_select_related = ("user", "tenant")
    readonly_fields = ("last_digest_at",)


@admin.register(AlertDelivery)
class AlertDeliveryAdmin(TenantScopedAdmin):
    list_display = ("id", "channel", "alert", "state", "attempts", "delivered_at", "created_at")
    list_filter = ("state", "channel")
    readonly_fields = (
        "tenant", "channel", "alert", "subscription", "alert_ids", "dedupe_key", "state",
        "attempts", "log", "next_attempt_at", "delivered_at", "created_at",
    )  # fmt: skip

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
