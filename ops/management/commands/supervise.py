"""python manage.py supervise worker|dispatcher [options]

Runs one process of the system and starts it again whenever it exits (a Celery worker exits
when it loses Redis for good: the known kombu behaviour). For a Procfile under honcho, which
stops everything when one process ends; under systemd `Restart=always` does the same job and
the process can be run directly (deploy/).
"""

from __future__ import annotations

import socket
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from geo_collect.processes import (
    ALL_QUEUES,
    ManagedProcess,
    Supervisor,
    dispatcher_command,
    worker_command,
)


class Command(BaseCommand):
    help = "Run a worker or the dispatcher, restarting it whenever it exits."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("process", choices=["worker", "dispatcher"])
        parser.add_argument("--queues", default=",".join(ALL_QUEUES), help="worker queues")
        parser.add_argument("--concurrency", type=int, default=8, help="worker threads")
        parser.add_argument("--name", default="", help="worker node name (default: queues@host)")
        parser.add_argument("--loglevel", default="INFO")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["process"] == "worker":
            queues = [q for q in options["queues"].split(",") if q]
            if not queues:
                raise CommandError("--queues names no queue")
            name = options["name"] or f"{queues[0]}-{len(queues)}@{socket.gethostname()}"
            command = worker_command(
                name=name,
                queues=queues,
                concurrency=options["concurrency"],
                loglevel=options["loglevel"],
            )
        else:
            command = dispatcher_command(interval=0.5)
        child = ManagedProcess(options["process"], command)
        Supervisor([child], say=self.stdout.write).run_forever()
