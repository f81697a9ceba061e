"""``manage.py report RUN_ID --format json|csv|xlsx|html [--output FILE] [--revision N]``.

Builds the checked run report (`analysis.reports.build_run_report`) from analysis revision N
(default: the newest finished one): conservation, the double count and the second count
must pass first, otherwise the command fails naming every difference and writes nothing.
Without --output the report goes to stdout (XLSX needs --output).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any
from uuid import UUID

from django.core.management.base import BaseCommand, CommandError, CommandParser

from analysis.report_exports import FORMATS, render_report
from analysis.reports import ReportIntegrityError, build_run_report
from sampling.models import Run


class Command(BaseCommand):
    help = "Write a run's report (JSON, CSV, XLSX or HTML) after its integrity checks pass."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id")
        parser.add_argument("--format", choices=FORMATS, default="json", dest="fmt")
        parser.add_argument("--output", default=None, help="file to write (default: stdout)")
        parser.add_argument("--revision", type=int, default=None, help="analysis revision")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            run_id = UUID(options["run_id"])
        except ValueError as error:
            raise CommandError(f"not a run id: {options['run_id']!r}") from error
        fmt: str = options["fmt"]
        output: str | None = options["output"]
        if fmt == "xlsx" and not output:
            raise CommandError("--format xlsx needs --output FILE")
        try:
            report = build_run_report(run_id=run_id, revision=options["revision"])
        except Run.DoesNotExist as error:
            raise CommandError(f"no run with id {run_id}") from error
        except ReportIntegrityError as error:
            raise CommandError(str(error)) from error
        data = render_report(report, fmt)
        if output:
            Path(output).write_bytes(data)
            self.stderr.write(f"wrote {fmt} report of run {run_id} to {output}")
        elif self.stdout._out is sys.stdout:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        else:
            self.stdout.write(data.decode(), ending="")
