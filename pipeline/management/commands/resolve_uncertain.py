"""python manage.py resolve_uncertain (SAMPLE_ID ... | --run RUN_ID) --as not_executed|abandon
[--note TEXT]"""

from __future__ import annotations

import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from pipeline.review import NotResolvable, Resolution, resolve_uncertain
from sampling.models import QueueState, Sample, SubmissionState


class Command(BaseCommand):
    help = "Resolve samples parked because their acceptance could not be confirmed."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("sample_ids", nargs="*", type=int)
        parser.add_argument("--run", type=uuid.UUID, help="every parked uncertain sample of a run")
        parser.add_argument(
            "--as", dest="resolution", required=True, choices=[r.value for r in Resolution]
        )
        parser.add_argument("--note", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        ids = list(options["sample_ids"])
        if options["run"]:
            ids += Sample.objects.filter(
                run_id=options["run"],
                queue_state=QueueState.PARKED,
                submission_state=SubmissionState.UNCERTAIN,
            ).values_list("pk", flat=True)
        if not ids:
            raise CommandError("no samples to resolve: give sample ids or --run")
        for sample_id in ids:
            try:
                resolve_uncertain(
                    sample_id=sample_id,
                    resolution=Resolution(options["resolution"]),
                    note=options["note"],
                )
            except Sample.DoesNotExist:
                raise CommandError(f"no sample with id {sample_id}") from None
            except NotResolvable as error:
                raise CommandError(str(error)) from None
        self.stdout.write(f"resolved {len(ids)} samples as {options['resolution']}")
