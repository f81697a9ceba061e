"""`manage.py worker_health` against a real worker process."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]


def test_worker_health_passes_for_a_running_worker(celery_worker: Any) -> None:
    worker = celery_worker(name="health")
    out = StringIO()
    for _ in range(30):  # until it has started consuming
        try:
            call_command("worker_health", "--timeout", "1", stdout=out)
            break
        except CommandError:
            assert worker.alive(), worker.text()
    assert out.getvalue().startswith("ok: health-")
