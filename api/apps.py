from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "api"
    verbose_name = "API"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import schema, webhooks  # noqa: F401  (schema registers the auth extension)

        webhooks.connect()
