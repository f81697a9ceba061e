"""The API's filter backend: django-filter's, except that an empty value of a typed filter
(`?run=`, `?campaign=`, `?status=`) is a 400 like any other value that is not of its type;
django-filter would drop it and answer the unfiltered list. A free-text filter may be empty."""

from __future__ import annotations

from typing import Any

import django_filters
from django.db.models import Model, QuerySet
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request


class StrictFilterBackend(DjangoFilterBackend):
    def filter_queryset(
        self, request: Request, queryset: QuerySet[Model], view: Any
    ) -> QuerySet[Model]:
        filterset = self.get_filterset(request, queryset, view)
        if filterset is not None:
            empty = {
                name: ["a value is required (leave the parameter out to not filter)"]
                for name, spec in filterset.filters.items()
                if request.query_params.get(name) == "" and not _free_text(spec)
            }
            if empty:
                raise ValidationError(empty)
        filtered: QuerySet[Model] = super().filter_queryset(request, queryset, view)
        return filtered


def _free_text(spec: Any) -> bool:
    return isinstance(spec, django_filters.CharFilter) and not isinstance(
        spec, django_filters.ChoiceFilter
    )
