from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "alerts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from pipeline.runs import follow_run_end
        from pipeline.sweeps import register_sweep

        from . import delivery, digest, evaluation

        # After every run's end: the campaign's rules are evaluated (an outbox row, ids only).
        follow_run_end(name="alerts.evaluate", follower=evaluation.record_run_end)
        # Deliveries whose broker message was lost, and the daily digests that are due.
        register_sweep(name="alerts.deliveries", sweep=delivery.sweep_stuck_deliveries)
        register_sweep(name="alerts.digests", sweep=digest.queue_due_digests, every=digest.every)
