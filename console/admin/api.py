"""Webhook endpoints and their deliveries in the console, scoped like every page
(console/admin_base.py): operators manage their tenants' endpoints. The actions call the
API's services (api/webhooks.py) on the selected rows of tenants where the user's role grants
the change, never on the union of their roles (console/admin_base.py narrows every action's
rows and records who ran it). API tokens: superusers make, list and revoke anyone's (a token
belongs to a person, not a tenant; people list and revoke their own through the API,
api/views/tokens.py)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from api.auth import (
    TokenLifetimeError,
    issue_token,
    revoke_tokens,
    token_state,
    with_database_now,
)
from api.models import ApiToken, WebhookDelivery, WebhookEndpoint
from api.webhooks import (
    NotRedeliverable,
    WebhookUrlError,
    check_url,
    new_secret,
    redeliver,
    rotate_secret,
    update_endpoint,
)
from console.admin_base import TenantScopedAdmin


class WebhookEndpointForm(forms.ModelForm):
    # A plain text field, not a URLField: that one turns a bare `169.254.169.254/x` into
    # https://169.254.169.254/x; here the scheme must be written (connectors/outbound.py).
    url = forms.CharField(max_length=500, help_text="https://… on a public host")

    class Meta:
        model = WebhookEndpoint
        fields = ("tenant", "url", "events", "active")

    def clean_url(self) -> str:
        try:
            return check_url(self.cleaned_data["url"])
        except WebhookUrlError as error:
            raise forms.ValidationError(str(error).removeprefix("url: ")) from None


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(TenantScopedAdmin):
    form = WebhookEndpointForm
    list_display = ("url", "tenant", "active", "created_at")
    list_filter = ("active", "tenant")
    list_select_related = ("tenant",)
    actions = ("deactivate", "activate", "rotate_secrets")

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if not obj.secret:
            obj.secret = new_secret()
        super().save_model(request, obj, form, change)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # The signing secret, for the receiver to verify X-Geo-Signature (api/webhooks.py).
        return ("secret",) if obj is not None else ()

    @admin.action(
        description="Deactivate the selected endpoints (no new deliveries)", permissions=["change"]
    )
    def deactivate(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> None:
        self._set_active(request, queryset, active=False)

    @admin.action(description="Activate the selected endpoints", permissions=["change"])
    def activate(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> None:
        self._set_active(request, queryset, active=True)

    @admin.action(
        description="Rotate the signing secret of the selected endpoints", permissions=["change"]
    )
    def rotate_secrets(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> None:
        endpoints = list(queryset)
        for endpoint in endpoints:
            rotate_secret(endpoint=endpoint)
        self.message_user(
            request,
            f"{len(endpoints)} secret(s) rotated; each endpoint's page shows its new secret",
            messages.SUCCESS,
        )

    def _set_active(
        self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint], *, active: bool
    ) -> None:
        endpoints = list(queryset)
        for endpoint in endpoints:
            update_endpoint(endpoint=endpoint, active=active)
        verb = "activated" if active else "deactivated"
        self.message_user(request, f"{len(endpoints)} endpoint(s) {verb}", messages.SUCCESS)


REDELIVER = "api.change_webhookendpoint"


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(TenantScopedAdmin):
    list_display = ("id", "event", "endpoint", "run", "state", "attempts", "delivered_at")
    list_filter = ("state", "event")
    readonly_fields = (
        "endpoint", "event", "run", "dedupe_key", "payload", "state", "attempts",
        "redeliveries", "log", "next_attempt_at", "delivered_at", "created_at",
    )  # fmt: skip
    actions = ("redeliver",)
    # Sending again is a change of the endpoint's traffic: the endpoint's change permission,
    # by the role in the delivery's own tenant.
    action_permissions = {"redeliver": REDELIVER}

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.action(description="Send the selected deliveries again", permissions=["redeliver"])
    def redeliver(self, request: HttpRequest, queryset: QuerySet[WebhookDelivery]) -> None:
        sent, pending = 0, 0
        for delivery in queryset.select_related("endpoint"):
            try:
                redeliver(delivery=delivery, by=str(request.user))
                sent += 1
            except NotRedeliverable:
                pending += 1
        text = f"{sent} delivery(ies) queued again" + (
            f"; {pending} still pending" if pending else ""
        )
        self.message_user(request, text, messages.SUCCESS)

    def has_redeliver_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.role_allows(request, REDELIVER, obj)


class ApiTokenForm(forms.ModelForm):
    """Only for a new token: who, what for, how long. The token is made by `issue_token`."""

    days = forms.IntegerField(min_value=1, help_text="lifetime in days")

    class Meta:
        model = ApiToken
        fields = ("user", "name")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["days"].initial = settings.GEO_API_TOKEN_DAYS
        self.fields["days"].help_text = f"lifetime in days, 1 to {settings.GEO_API_TOKEN_MAX_DAYS}"

    def clean_days(self) -> int:
        days: int = self.cleaned_data["days"]
        if days > settings.GEO_API_TOKEN_MAX_DAYS:
            raise forms.ValidationError(f"at most {settings.GEO_API_TOKEN_MAX_DAYS} days")
        return days


@admin.register(ApiToken)
class ApiTokenAdmin(TenantScopedAdmin):
    """Superusers only (tenancy/scope.py: api.apitoken has no tenant). The token in clear is
    shown once, in the message after Save; the list shows each token's state and last use."""

    list_display = ("prefix", "name", "user", "state", "created_at", "expires_at",
                    "last_used_at", "revoked_at", "revoked_by")  # fmt: skip
    list_filter = ("revoked_at",)
    list_select_related = ("user", "revoked_by")
    search_fields = ("prefix", "name", "user__username")
    readonly_fields = ("user", "name", "prefix", "created_at", "expires_at", "last_used_at",
                       "revoked_at", "revoked_by")  # fmt: skip
    actions = ("revoke",)
    action_permissions = {"revoke": "api.change_apitoken"}  # no role grants it: superusers

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return with_database_now(super().get_queryset(request))

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        if obj is None:
            kwargs["form"] = ApiTokenForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.readonly_fields if obj is not None else ()

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.readonly_fields if obj is not None else ("user", "name", "days")

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a token is made and revoked, never edited

    @admin.display(description="state")
    def state(self, token: ApiToken) -> str:
        return token_state(token)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        try:
            token, raw = issue_token(user=obj.user, name=obj.name, days=form.cleaned_data["days"])
        except TokenLifetimeError as error:  # the form's own check stops this first
            raise forms.ValidationError(str(error)) from None
        obj.pk = token.pk
        obj.refresh_from_db()
        self.message_user(
            request,
            f"Token for {token.user}: {raw} (shown only now; it expires at "
            f"{token.expires_at:%Y-%m-%d %H:%M} UTC)",
            messages.WARNING,
        )

    @admin.action(description="Revoke the selected tokens", permissions=["revoke"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        revoked = revoke_tokens(tokens=queryset, by=request.user)
        self.message_user(request, f"{revoked} token(s) revoked", messages.SUCCESS)

    def has_revoke_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The model's change permission, which no role grants: superusers.
        return request.user.has_perm("api.change_apitoken")
