"""``manage.py reanalyse RUN_ID [--analyser NAME] [--no-wait] [--timeout S]``

Re-runs brand analysis for every sample of a run from its stored answer, as a new analysis
revision (earlier revisions stay as they are), through the analysis queue: the messages go
out through the outbox, which the dispatcher publishes, and `analysis` workers do the work.
Shows a progress bar until the revision is done. When the new revision used the same
analyser and version as the one it re-analyses, every stored result must be reproduced
exactly; any difference fails the command, named.
"""

from __future__ import annotations

import time
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from analysis.analysers import ANALYSERS
from analysis.models import AnalysisRevision
from analysis.selectors import revision_differences, revision_progress
from analysis.services import start_reanalysis
from sampling.models import Run

BAR_WIDTH = 30


def progress_bar(done: int, expected: int) -> str:
    filled = BAR_WIDTH if expected == 0 else BAR_WIDTH * done // expected
    return f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {done}/{expected}"


class Command(BaseCommand):
    help = "Re-analyse a whole run from stored evidence as a new analysis revision."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("run_id")
        parser.add_argument("--analyser", choices=ANALYSERS, default=None)
        parser.add_argument("--no-wait", action="store_true", help="queue it and return")
        parser.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            run = Run.objects.get(pk=options["run_id"])
        except (Run.DoesNotExist, ValidationError, ValueError):
            raise CommandError(f"no run {options['run_id']!r}") from None
        revision = start_reanalysis(run_id=run.pk, analyser=options["analyser"])
        self.stdout.write(
            f"run {run.pk}: analysis revision {revision.number} with {revision.analyser} "
            f"{revision.analyser_version}, {revision.expected} samples queued on the analysis "
            "queue (published by the dispatcher)"
        )
        if options["no_wait"]:
            return
        self._wait(revision, options["timeout"])
        self._check_reproduced(AnalysisRevision.objects.get(pk=revision.pk))

    def _wait(self, revision: AnalysisRevision, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            progress = revision_progress(revision_id=revision.pk)
            self.stdout.write("\r" + progress_bar(progress.done, progress.expected), ending="")
            self.stdout.flush()
            if progress.finished:
                self.stdout.write("")
                return
            if time.monotonic() > deadline:
                self.stdout.write("")
                raise CommandError(
                    f"revision {revision.number} not done after {timeout:.0f}s "
                    f"({progress.done}/{progress.expected}); it goes on in the background"
                )
            time.sleep(0.5)

    def _check_reproduced(self, revision: AnalysisRevision) -> None:
        source = revision.source
        same = source is not None and (source.analyser, source.analyser_version) == (
            revision.analyser,
            revision.analyser_version,
        )
        if source is None or not same:
            self.stdout.write(f"revision {revision.number} done")
            return
        differences = revision_differences(source, revision)
        if differences:
            shown = "\n".join(differences[:50])
            raise CommandError(
                f"revision {revision.number} does not reproduce revision {source.number} with "
                f"the same analyser version ({len(differences)} differences):\n{shown}"
            )
        self.stdout.write(
            f"revision {revision.number} reproduces revision {source.number} exactly "
            f"({revision.expected} samples, {revision.analyser} {revision.analyser_version})"
        )
