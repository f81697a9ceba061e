"""python manage.py repair_evidence RUN_ID"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from pipeline.repair import repair_evidence
from sampling.models import Run


class Command(BaseCommand):
    help = (
        "Fetch again the screenshots missing from a run's finished samples and store them "
        "as new evidence; stored text is never overwritten."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            run = Run.objects.get(pk=uuid.UUID(options["run_id"]))
        except (ValueError, Run.DoesNotExist):
            raise CommandError(f"no run with id {options['run_id']!r}") from None
        self.stdout.write(json.dumps(repair_evidence(run_id=run.pk).as_dict()))
