"""Webhook endpoints and their deliveries in the console, scoped like every page
(console/admin_base.py): operators manage their tenants' endpoints."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from api.models import WebhookDelivery, WebhookEndpoint
from api.webhooks import WebhookUrlError, check_url, new_secret
from console.admin_base import TenantScopedAdmin


class WebhookEndpointForm(forms.ModelForm):
    url = forms.URLField(max_length=500, assume_scheme="https")

    class Meta:
        model = WebhookEndpoint
        fields = ("tenant", "url", "events", "active")

    def clean_url(self) -> str:
        try:
            return check_url(self.cleaned_data["url"])
        except WebhookUrlError as error:
            raise forms.ValidationError(str(error)) from None


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(TenantScopedAdmin):
    form = WebhookEndpointForm
    list_display = ("url", "tenant", "active", "created_at")
    list_filter = ("active", "tenant")
    list_select_related = ("tenant",)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if not obj.secret:
            obj.secret = new_secret()
        super().save_model(request, obj, form, change)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # The signing secret, for the receiver to verify X-Geo-Signature (api/webhooks.py).
        return ("secret",) if obj is not None else ()


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(TenantScopedAdmin):
    list_display = ("id", "event", "endpoint", "run", "state", "attempts", "delivered_at")
    list_filter = ("state", "event")
    readonly_fields = (
        "endpoint", "event", "run", "dedupe_key", "payload", "state", "attempts", "log",
        "delivered_at", "created_at",
    )  # fmt: skip

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
