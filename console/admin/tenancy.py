"""Tenants (created by superusers or `manage.py create_tenant`) and who belongs to them
(superusers or `manage.py grant_role`)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from console.admin_base import TenantScopedAdmin
from tenancy.models import Tenant, TenantMembership


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdmin):
    list_display = ("slug", "name", "max_concurrency", "max_calls_per_second", "created_at")
    search_fields = ("slug", "name")
    fields = ("slug", "name", "max_concurrency", "max_calls_per_second")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)


@admin.register(TenantMembership)
class TenantMembershipAdmin(TenantScopedAdmin):
    """Only superusers manage who belongs to which tenant (or `manage.py grant_role`): a
    member who could add memberships could make themselves a member of any tenant."""

    list_display = ("id", "user", "tenant", "role", "created_at")
    list_filter = ("role", "tenant")
    list_select_related = ("user", "tenant")

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self.has_module_permission(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)
