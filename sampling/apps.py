from django.apps import AppConfig


class SamplingConfig(AppConfig):
    name = "sampling"
    default_auto_field = "django.db.models.BigAutoField"
