"""Brands (tenants and their memberships: console/admin/tenancy.py)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin

from console.admin_base import TenantScopedAdmin
from sampling.models import Brand
from sampling.planning import normalize_text


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
class BrandAdmin(TenantScopedAdmin):
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
