from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    name = "monitoring"
    verbose_name = "Monitoring"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from analysis.services import follow_revision_done
        from pipeline.invariants import register_check
        from pipeline.runs import follow_run_end
        from pipeline.sweeps import register_sweep

        from . import checks, services, tasks  # noqa: F401  (tasks registers the Celery task)

        # The series rows of a run, after its end and after each finished re-analysis
        # (pipeline/runs.py, analysis/services.py: the explicit chains).
        follow_run_end(name="monitoring.series", follower=services.record_run_end)
        follow_revision_done(name="monitoring.series", follower=services.record_revision_done)
        # A reviewer's decision after the run's end: its rows written again (the sweeps).
        register_sweep(
            name="monitoring.reviewed_series",
            sweep=services.refresh_reviewed_series,
            every=services.refresh_every,
        )
        # check_invariants compares them with the report of the same run.
        register_check(name="series", check=checks.check_series)
