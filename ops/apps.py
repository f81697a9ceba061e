from django.apps import AppConfig


class OpsConfig(AppConfig):
    """Operations: metrics, health checks, the operations page, process supervision."""

    name = "ops"
    default_auto_field = "django.db.models.BigAutoField"
