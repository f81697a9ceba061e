from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "api"
    verbose_name = "API"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from alerts.services import follow_alert_fired
        from pipeline.runs import follow_run_end
        from pipeline.sweeps import register_sweep

        from . import schema, webhooks  # noqa: F401  (schema registers the auth extension)

        # What the API does after every run's end: its webhooks (pipeline/runs.py, the chain).
        follow_run_end(name="api.webhooks", follower=webhooks.record_run_end)
        # Deliveries whose broker message was lost, sent again (the dispatcher's sweeps).
        register_sweep(name="api.webhook_deliveries", sweep=webhooks.sweep_stuck_deliveries)
        # A fired alert's signed `alert.fired` event (alerts/services.py `fire`).
        follow_alert_fired(name="api.webhooks", follower=webhooks.record_alert_fired)
