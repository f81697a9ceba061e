"""Admin building blocks every app's admin uses. `TenantScopedAdmin` takes every queryset of
the page (changelist, change view, search, related filters, autocomplete, foreign-key choices,
inlines, custom views through `get_object`) from `tenancy.scope`; a row of another tenant is a
404, exactly like an id that does not exist."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.paginator import Paginator
from django.db import models
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import URLPattern, path
from django.utils.functional import cached_property
from django.views.decorators.http import require_POST

from tenancy.scope import permission, scoped, tenant_filter, user_scope


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


class TenantScopedAdmin(ScopedFormFieldsMixin, admin.ModelAdmin):
    """Every row through `tenancy.scope.scoped`; another tenant's row is a 404."""

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return scoped(super().get_queryset(request), request.user)

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


class ScopedInline(ScopedFormFieldsMixin, admin.TabularInline):
    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return scoped(super().get_queryset(request), request.user)


class ScopedStackedInline(ScopedFormFieldsMixin, admin.StackedInline):
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
