from typing import Any

from django.apps import AppConfig
from django.db import connections
from django.db.models.signals import post_migrate


def _install_counters(sender: AppConfig, using: str = "default", **kwargs: Any) -> None:
    """Re-create the counter triggers after every migrate: on SQLite a later migration's table
    rebuild of sampling_sample drops them (sampling/counters.py)."""
    from . import counters  # its bucket definitions read the models, loaded after this module

    connection = connections[using]
    if counters.TABLE in connection.introspection.table_names():
        counters.install(connection)


class SamplingConfig(AppConfig):
    name = "sampling"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        post_migrate.connect(_install_counters, sender=self)
