"""The queue lists written by hand (Procfile, systemd env files, README) agree with the
platform declarations, and `manage.py worker_queues` prints what they must hold."""

from __future__ import annotations

from io import StringIO

from django.core.management import call_command

from connectors.platforms import worker_groups, worker_queues
from tests.platform_copies import procfile_problems, readme_problems, systemd_problems


def test_the_procfile_workers_consume_their_groups_queues() -> None:
    assert procfile_problems() == []


def test_the_systemd_worker_groups_consume_their_queues() -> None:
    assert systemd_problems() == []


def test_every_readme_worker_command_names_every_queue() -> None:
    assert readme_problems() == []


def test_the_worker_groups_together_consume_every_queue_once() -> None:
    consumed = [queue for queues in worker_groups().values() for queue in queues]
    assert sorted(consumed) == sorted(worker_queues())


def test_worker_queues_prints_a_groups_queues_for_celery() -> None:
    out = StringIO()
    call_command("worker_queues", "--group", "provider", stdout=out)
    assert out.getvalue().strip() == ",".join(worker_groups()["provider"])
    assert "platform.chatgpt_web" in out.getvalue()
    out = StringIO()
    call_command("worker_queues", stdout=out)
    assert out.getvalue().strip().split(",") == list(worker_queues())
