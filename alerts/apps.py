from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "alerts"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from monitoring.services import follow_series_written
        from pipeline.sweeps import register_sweep

        from . import delivery, digest, evaluation

        # After a run's series rows are written: its campaign's rules are evaluated (an outbox
        # row, ids only).
        follow_series_written(name="alerts.evaluate", follower=evaluation.record_series_written)
        # Deliveries whose broker message was lost, and the daily digests that are due.
        register_sweep(name="alerts.deliveries", sweep=delivery.sweep_stuck_deliveries)
        register_sweep(name="alerts.digests", sweep=digest.queue_due_digests, every=digest.every)
