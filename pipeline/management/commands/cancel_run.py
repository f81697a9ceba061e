"""python manage.py cancel_run RUN_ID"""

from __future__ import annotations

import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from pipeline.runs import RunAlreadyFinished, cancel_run
from sampling.models import Run


class Command(BaseCommand):
    help = (
        "Cancel a run: samples the upstream never accepted are released; its accepted tasks "
        "are asked to stop upstream where the platform can."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            cancelled = cancel_run(run_id=uuid.UUID(options["run_id"]))
        except (ValueError, Run.DoesNotExist):
            raise CommandError(f"no run with id {options['run_id']!r}") from None
        except RunAlreadyFinished as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"cancelled {cancelled} samples that were never accepted upstream")
        self.stdout.write(
            "accepted tasks are asked to stop where their platform can (after this commit, by "
            "a worker); `run_status` shows the upstream's answers"
        )
