"""Real processes for re-analysis: a Celery worker on the analysis queue, Redis, PostgreSQL
and the simulator (the worker's LLM judge asks it)."""

from tests.e2e.conftest import broker, celery_worker, worker_env  # noqa: F401
from tests.reports.conftest import simulator  # noqa: F401
