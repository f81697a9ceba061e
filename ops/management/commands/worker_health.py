"""python manage.py worker_health [--name NODE] [--timeout S]

Exit 0 when a Celery worker answers a control ping through the broker (it is connected and
consuming), 1 otherwise: for a systemd watchdog, a container health check or a person.
Without --name any worker answering counts.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from geo_collect.celery import app


class Command(BaseCommand):
    help = "Ping Celery workers through the broker; exit 1 if none (or not the named) answers."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", default="", help="worker node name, e.g. w1@host")
        parser.add_argument("--timeout", type=float, default=5.0)

    def handle(self, *args: Any, **options: Any) -> None:
        destination = [options["name"]] if options["name"] else None
        try:
            replies = app.control.ping(destination=destination, timeout=options["timeout"]) or []
        except Exception as error:  # the broker itself is unreachable
            raise CommandError(f"broker unreachable: {type(error).__name__}: {error}") from None
        nodes = sorted(node for reply in replies for node in reply)
        if not nodes:
            target = options["name"] or "any worker"
            raise CommandError(f"no answer from {target} within {options['timeout']:g}s")
        self.stdout.write("ok: " + ", ".join(nodes))
