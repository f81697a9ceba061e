from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class TenancyConfig(AppConfig):
    name = "tenancy"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        post_migrate.connect(_sync_roles, dispatch_uid="tenancy-sync-roles")


def _sync_roles(sender: AppConfig, **kwargs: Any) -> None:
    """Keep the role groups equal to `tenancy.roles.ROLE_PERMISSIONS` after every migrate
    (a new model's permissions join its roles without a new data migration)."""
    if sender.name != "tenancy":
        return
    from .roles import sync_role_groups

    sync_role_groups(using=kwargs.get("using", "default"))
