"""python manage.py check_invariants [--run RUN_ID]"""

from __future__ import annotations

import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from pipeline.invariants import CHECKS, check_all, totals
from sampling.models import Run


class Command(BaseCommand):
    help = (
        "Check, with SQL over the whole database (or one run), the invariants that must survive "
        "crashes, duplicates and late writers. Prints each violation; exits 1 if there is any."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--run", default=None, help="check only this run (its id)")

    def handle(self, *args: Any, **options: Any) -> None:
        run_id: uuid.UUID | None = None
        if options["run"] is not None:
            try:
                run_id = uuid.UUID(options["run"])
            except ValueError:
                raise CommandError(f"not a run id: {options['run']!r}") from None
            if not Run.objects.filter(pk=run_id).exists():
                raise CommandError(f"no run with id {run_id}")
        violations = check_all(run_id)
        seen = totals(run_id)
        scope = f"run {run_id}" if run_id else f"{seen.runs} run(s)"
        summary = (
            f"{len(CHECKS)} invariants over {scope}: {seen.samples} samples, "
            f"{seen.attempts} attempts, {seen.captures} captures, {seen.stale_writes} stale "
            f"writes refused"
        )
        if not violations:
            self.stdout.write(f"invariants OK — {summary}")
            return
        for violation in violations:
            self.stdout.write(f"VIOLATION {violation}")
        raise CommandError(f"{len(violations)} violation(s) — {summary}")
