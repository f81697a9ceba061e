"""python manage.py run_status RUN_ID [--json]"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from sampling.models import Run
from sampling.selectors import run_status, upstream_cancels


class Command(BaseCommand):
    help = "Print a run's status from the status aggregation service."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            run_id = uuid.UUID(options["run_id"])
            status = run_status(run_id=run_id)
        except (ValueError, Run.DoesNotExist):
            raise CommandError(f"no run with id {options['run_id']!r}") from None
        asked = upstream_cancels(run_id=run_id)
        data = {"run_id": str(run_id), **status.as_dict(), "upstream_cancel": asked.as_dict()}
        if options["json"]:
            self.stdout.write(json.dumps(data, indent=2))
            return
        self.stdout.write(
            f"run {run_id}: {status.outcome.value} — planned {status.planned}, "
            f"succeeded {status.succeeded}, failed {status.failed_not_cancelled}, "
            f"cancelled {status.cancelled}, invalid {status.invalid}, "
            f"review {status.review}, pending {status.pending}"
        )
        for layer, counts in status.layers.items():
            self.stdout.write(f"  {layer:<11} " + ", ".join(f"{k}={v}" for k, v in counts.items()))
        if asked.asked:  # a cancelled run's accepted tasks, asked to stop upstream
            self.stdout.write(
                f"  upstream cancel asked for {asked.asked} tasks: acknowledged "
                f"{asked.acknowledged}, failed {asked.failed}, "
                f"unanswered {asked.asked - asked.answered}"
            )
