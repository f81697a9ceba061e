import gc
import os

from celery import Celery
from celery.signals import setup_logging, worker_ready

from . import broker  # noqa: F401  (registers the embedded broker's transport)

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
