import gc
import os

from celery import Celery
from celery.signals import setup_logging, task_postrun, task_prerun, worker_ready

from . import (
    broker,  # noqa: F401  (registers the embedded broker's transport)
    logs,
)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "geo_collect.settings")

app = Celery("geo_collect")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@setup_logging.connect
def _django_logging(**kwargs: object) -> None:
    """Workers log like every other process (settings.LOGGING: JSON lines, secrets
    redacted), not with Celery's own format."""
    from logging.config import dictConfig

    from django.conf import settings

    dictConfig(settings.LOGGING)


@worker_ready.connect
def _freeze_startup_objects(**kwargs: object) -> None:
    """Everything the worker built to start (Django's apps and models, Celery, the modules) is
    moved out of the collector's reach: a full collection otherwise walks those ~180,000
    objects again and again while the tasks allocate (docs/decisions.md, "Workers freeze their
    start-up objects")."""
    gc.collect()
    gc.freeze()


@task_prerun.connect
@task_postrun.connect
def _fresh_log_context(**kwargs: object) -> None:
    """Each task starts and ends with no log context: the fields a step bound (run, sample,
    token) stayed on the worker thread and were written on the next task's lines, another
    run's or another tenant's ("run finished" of the run-end task carried them)."""
    logs.clear()
