from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    name = "monitoring"
    verbose_name = "Monitoring"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from analysis.services import follow_revision_done
        from pipeline.invariants import register_check
        from pipeline.runs import follow_run_end

        from . import checks, services, tasks  # noqa: F401  (tasks registers the Celery task)

        # The series rows of a run, after its end and after each finished re-analysis
        # (pipeline/runs.py, analysis/services.py: the explicit chains).
        follow_run_end(name="monitoring.series", follower=services.record_run_end)
        follow_revision_done(name="monitoring.series", follower=services.record_revision_done)
        # check_invariants compares them with the report of the same run.
        register_check(name="series", check=checks.check_series)
