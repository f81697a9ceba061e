"""python manage.py worker_queues [--group direct|provider|evidence|analysis]

Prints the queues a worker consumes, comma-separated, as `celery worker -Q` takes them: without
--group every queue the deployment publishes to, with it one worker group's
(connectors/platforms.py). The Procfile and deploy/systemd/worker-*.env hold the same lists by
hand; tests/ops/test_queue_copies.py checks they agree.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from connectors.platforms import worker_groups, worker_queues


class Command(BaseCommand):
    help = "Print the worker queues (all, or one worker group's), comma-separated."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--group", choices=sorted(worker_groups()), default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(",".join(worker_queues(options["group"])))
