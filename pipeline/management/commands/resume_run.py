"""python manage.py resume_run RUN_ID [--dry-run]"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from billing.services import BillingError
from pipeline.resume import ResumeRefused, resume_run
from sampling.models import Run


class Command(BaseCommand):
    help = (
        "Ask every sample of a finished or stuck run that is not valid and completed again, as "
        "a new attempt; valid completed samples are kept. --dry-run prints the plan only."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id")
        parser.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            run_id = uuid.UUID(options["run_id"])
            plan = resume_run(run_id=run_id, dry_run=options["dry_run"], actor="manage.py")
        except (ValueError, Run.DoesNotExist) as error:
            if isinstance(error, BillingError):
                raise CommandError(str(error)) from None
            raise CommandError(f"no run with id {options['run_id']!r}") from None
        except ResumeRefused as refused:
            raise CommandError(str(refused)) from None
        self.stdout.write(json.dumps(plan.as_dict(), sort_keys=False))
