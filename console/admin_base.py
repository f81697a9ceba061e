"""Admin building blocks every app's admin uses. `TenantScopedAdmin` takes every queryset of
the page (changelist, change view, search, related filters, autocomplete, foreign-key choices,
inlines, custom views through `get_object`) from `tenancy.scope`; a row of another tenant is a
404, exactly like an id that does not exist.

What a user may do to a row (change, delete, inline edits, every action, custom buttons) is
decided by their role in that row's own tenant (`tenancy.scope.allows_on`), never by the
union of their roles: Django's own checks ask the role groups, which a user with roles in two
tenants holds both of. Actions run only on the selected rows whose tenant's role allows them,
and every state-changing action records who ran it in the admin log (the object's history)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.utils import unquote
from django.core.exceptions import ImproperlyConfigured, PermissionDenied
from django.core.paginator import Paginator
from django.db import models
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import URLPattern, path
from django.utils.functional import cached_property
from django.views.decorators.http import require_POST

from tenancy.scope import allows_on, permission, scoped, scoped_by, tenant_filter, user_scope

Action = Callable[..., HttpResponse | None]


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


class ScopedRelatedFilter(admin.RelatedFieldListFilter):
    """A foreign-key filter whose choices are only the related rows the user may see."""

    def field_choices(self, field: Any, request: HttpRequest, model_admin: Any) -> list[Any]:
        related = field.remote_field.model
        queryset = scoped(related._default_manager.all(), request.user)
        ordering = self.field_admin_ordering(field, request, model_admin)
        if ordering:
            queryset = queryset.order_by(*ordering)
        return [(obj.pk, str(obj)) for obj in queryset[:200]]


class NamedFilter(admin.SimpleListFilter):
    """A list filter whose query parameter is its title unless it says otherwise."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.parameter_name = cls.parameter_name or str(cls.title)


class OptionsFilter(NamedFilter):
    """A list filter from a table: each option's value, label and the rows it keeps."""

    options: dict[str, tuple[str, Q]]

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(value, label) for value, (label, _) in self.options.items()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        option = self.options.get(self.value() or "")
        return queryset if option is None else queryset.filter(option[1])


class FieldValueFilter(NamedFilter):
    """Rows whose `field` is the chosen value; `values` says which values to offer."""

    field: str

    def values(self, request: HttpRequest, model_admin: Any) -> list[str]:
        raise NotImplementedError

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(value, value) for value in self.values(request, model_admin)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(**{self.field: value}) if value else queryset


def _scoped_formfield(field: Any, request: HttpRequest, editing: type[models.Model]) -> Any:
    """Choices: related rows the user may see, of tenants where their role may edit the row
    being edited (an analyst of tenant B who operates tenant A creates campaigns for A only)."""
    if field is None or not isinstance(getattr(field, "queryset", None), QuerySet):
        return field
    queryset = scoped(field.queryset, request.user)
    tenant_ids = user_scope(request.user).tenant_ids(permission(editing, "change"))
    condition = tenant_filter(queryset.model, tenant_ids)
    field.queryset = queryset if condition is None else queryset.filter(condition)
    return field


class ScopedFormFieldsMixin:
    """Foreign-key and many-to-many choices limited to the user's tenants."""

    model: type[models.Model]

    def formfield_for_foreignkey(
        self, db_field: models.ForeignKey[Any, Any], request: HttpRequest, **kwargs: Any
    ) -> Any:
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)  # type: ignore[misc]
        return _scoped_formfield(field, request, self.model)

    def formfield_for_manytomany(
        self, db_field: models.ManyToManyField[Any, Any], request: HttpRequest, **kwargs: Any
    ) -> Any:
        field = super().formfield_for_manytomany(db_field, request, **kwargs)  # type: ignore[misc]
        return _scoped_formfield(field, request, self.model)


class PerTenantPermissionsMixin:
    """Django's has_*_permission(request, obj) by the role in obj's tenant. For an inline,
    obj is the parent row, whose tenant is the inline rows' tenant."""

    model: type[models.Model]

    def role_allows(self, request: HttpRequest, action: str, obj: Any = None) -> bool:
        """The user's role in obj's tenant grants `action` ("change", or a whole
        "app.codename") on this admin's model; obj None: in some tenant of theirs."""
        perm = action if "." in action else permission(self.model, action)
        return allows_on(request.user, perm, obj)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(super().has_view_permission(request, obj)) and (  # type: ignore[misc]
            self.role_allows(request, "view", obj) or self.role_allows(request, "change", obj)
        )

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        # ModelAdmin's takes (request), an inline's (request, parent): the parent's tenant.
        parent = args[0] if args else None
        allowed = super().has_add_permission(request, *args)  # type: ignore[misc]
        return bool(allowed) and self.role_allows(request, "add", parent)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        allowed = super().has_change_permission(request, obj)  # type: ignore[misc]
        return bool(allowed) and self.role_allows(request, "change", obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        allowed = super().has_delete_permission(request, obj)  # type: ignore[misc]
        return bool(allowed) and self.role_allows(request, "delete", obj)


class TenantScopedAdmin(PerTenantPermissionsMixin, ScopedFormFieldsMixin, admin.ModelAdmin):
    """Every row through `tenancy.scope.scoped`; another tenant's row is a 404; every
    permission by the role in the row's tenant."""

    # An action's `permissions=[name]` -> the permission each selected row's tenant must grant:
    # a model action ("change") or a whole "app.codename". view/add/change/delete need none.
    action_permissions: dict[str, str] = {}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return scoped(super().get_queryset(request), request.user)

    # --- actions: per row's tenant, with the actor recorded --------------------------------

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions: dict[str, Any] = super().get_actions(request) or {}
        return {
            name: (self._per_tenant_action(func, name), name, description)
            for name, (func, _, description) in actions.items()
        }

    def action_perms(self, func: Any) -> list[str]:
        """What an action needs of each selected row's tenant; an action that declares no
        permissions changes something (Django would let anyone who may view run it)."""
        names = getattr(func, "allowed_permissions", None) or ("change",)
        return [self._action_perm(name) for name in names]

    def _action_perm(self, name: str) -> str:
        action = self.action_permissions.get(name, name)
        if "." in action:
            return action
        if action not in ("view", "add", "change", "delete"):
            raise ImproperlyConfigured(
                f"{type(self).__name__}.action_permissions names no permission for {name!r}"
            )
        return permission(self.model, action)

    def _per_tenant_action(self, func: Any, name: str) -> Action:
        perms = self.action_perms(func)
        changes = any(not perm.split(".", 1)[1].startswith("view_") for perm in perms)

        def action(modeladmin: Any, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
            allowed = queryset
            for perm in perms:
                allowed = scoped_by(allowed, request.user, perm)
            left_out = queryset.exclude(pk__in=allowed.values("pk")).count()
            if left_out:
                self.message_user(
                    request,
                    f"{left_out} of the selected rows left out: your role in their tenant "
                    "does not allow this action.",
                    messages.WARNING,
                )
            if not allowed.exists():
                return None
            if changes and name != "delete_selected":  # deletions log themselves
                LogEntry.objects.log_actions(
                    user_id=cast(int, request.user.pk),
                    queryset=list(allowed),
                    action_flag=CHANGE,
                    change_message=f"Action: {name}",
                )
            return func(modeladmin, request, allowed)

        return action

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        # The last word at the write: the row's (new) tenant must allow it for this role.
        if not self.role_allows(request, "change" if change else "add", obj):
            raise PermissionDenied("your role in this row's tenant may not save it")
        super().save_model(request, obj, form, change)

    def save_formset(self, request: HttpRequest, form: Any, formset: Any, change: bool) -> None:
        perm = permission(formset.model, "change")
        if formset.has_changed() and not allows_on(request.user, perm, form.instance):
            raise PermissionDenied("your role in this row's tenant may not change its rows")
        super().save_formset(request, form, formset, change)

    def object_url(
        self, action: str, view: Callable[..., HttpResponse], *, post_only: bool = False
    ) -> URLPattern:
        """`<object_id>/<action>/` behind the admin site's login, named
        `<app_label>_<model_name>_<action>`; `post_only` refuses any other method."""
        if post_only:
            view = require_POST(view)
        return path(
            f"<path:object_id>/{action}/",
            self.admin_site.admin_view(view),
            name=f"{self.opts.app_label}_{self.opts.model_name}_{action}",
        )

    def get_list_filter(self, request: HttpRequest) -> Any:
        return [self._scoped_filter(entry) for entry in super().get_list_filter(request)]

    def _scoped_filter(self, entry: Any) -> Any:
        if isinstance(entry, str) and "__" not in entry:
            field = self.opts.get_field(entry)
            if field.is_relation and field.many_to_one:
                return (entry, ScopedRelatedFilter)
        return entry

    def _scoped_object_or_404(self, request: HttpRequest, object_id: str) -> Any:
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404(f"no such {self.opts.verbose_name}")
        return obj

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # Before any permission check: a 403 would confirm that the row exists.
        obj = self._scoped_object_or_404(request, object_id)
        extra_context = {**(extra_context or {}), **self.change_view_context(request, obj)}
        return super().change_view(request, object_id, form_url, extra_context)

    def change_view_context(self, request: HttpRequest, obj: Any) -> dict[str, Any]:
        """What a change page shows beyond its fields (the object is in the user's scope)."""
        return {}

    def history_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        self._scoped_object_or_404(request, object_id)
        return super().history_view(request, object_id, extra_context)

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        self._scoped_object_or_404(request, object_id)
        return super().delete_view(request, object_id, extra_context)


class ReadOnlyMixin:
    """History and ledger rows are written by services only and never changed here."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class HistoryAdmin(ReadOnlyMixin, TenantScopedAdmin):
    """History is append-only: nobody adds, edits or deletes it from the console."""

    paginator = CappedCountPaginator
    show_full_result_count = False  # the unfiltered total would COUNT(*) the whole table
    list_per_page = 50
    ordering = ("-id",)  # newest first, on the primary key index


class ScopedInline(PerTenantPermissionsMixin, ScopedFormFieldsMixin, admin.TabularInline):
    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return scoped(super().get_queryset(request), request.user)


class ScopedStackedInline(PerTenantPermissionsMixin, ScopedFormFieldsMixin, admin.StackedInline):
    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return scoped(super().get_queryset(request), request.user)


class HistoryInline(ReadOnlyMixin, ScopedInline):
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = True


class InternalTableMixin:
    """Plumbing a superuser debugs with (refused stale writes, attempts, analysis revisions):
    its pages stay reachable from the rows that link them for whoever may view them, but the
    home page and the app pages list it for superusers only, so people see their work there."""

    internal_table = True

    def get_model_perms(self, request: HttpRequest) -> dict[str, bool]:
        if not request.user.is_superuser:
            return {}
        return super().get_model_perms(request)  # type: ignore[misc]
