"""``manage.py analysis_eval [--analyser NAME] [--golden DIR] [--repeats N] [--errors]``

Runs an analyser over the labelled golden set (tests/analysis/golden/) and prints precision
and recall per context class, Cohen's kappa against the labels, and — for an analyser that
is not deterministic (the LLM judge) — its self-agreement over N repeated judgements.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from analysis.analysers import ANALYSERS, UnknownAnalyser, get_analyser
from analysis.evaluation import evaluate, load_golden, render_table

DEFAULT_GOLDEN = Path(settings.BASE_DIR) / "tests" / "analysis" / "golden"
JUDGE_REPEATS = 3


class Command(BaseCommand):
    help = "Agreement of an analyser with the labelled golden set."
    requires_system_checks: list[str] = []
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--analyser", choices=ANALYSERS, default=None)
        parser.add_argument("--golden", default=str(DEFAULT_GOLDEN), help="golden set folder")
        parser.add_argument(
            "--repeats",
            type=int,
            default=None,
            help=f"judgements per answer (default 1, or {JUDGE_REPEATS} when not deterministic)",
        )
        parser.add_argument("--errors", action="store_true", help="list every disagreement")

    def handle(self, *args: Any, **options: Any) -> None:
        golden = Path(options["golden"])
        if not (golden / "answers.jsonl").is_file() or not (golden / "campaigns.json").is_file():
            raise CommandError(f"no golden set in {golden} (answers.jsonl, campaigns.json)")
        try:
            analyser = get_analyser(options["analyser"])
            items = load_golden(golden)
        except (UnknownAnalyser, ValueError, KeyError) as exc:
            raise CommandError(str(exc)) from exc
        repeats = options["repeats"] or (1 if analyser.info.deterministic else JUDGE_REPEATS)
        if repeats < 1:
            raise CommandError("--repeats must be at least 1")
        evaluation = evaluate(analyser, items, repeats=repeats)
        self.stdout.write(render_table(evaluation))
        if options["errors"]:
            self.stdout.write("\n".join(["disagreements:", *evaluation.errors]))
