import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "geo_collect.settings")

app = Celery("geo_collect")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
