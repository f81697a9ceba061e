"""``manage.py export_facts --since DATE [--until DATE]``: the series and sample-level facts
of the runs finished in those days as Parquet in the evidence store (monitoring/exports.py;
docs/facts.md)."""

from __future__ import annotations

from datetime import date
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from monitoring.exports import export_facts


def _day(value: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise CommandError(f"not a date (YYYY-MM-DD): {value!r}") from None


class Command(BaseCommand):
    help = (
        "Write the series and sample facts (samples, mentions, citations) of every run "
        "finished since DATE as Parquet, partitioned by tenant and day, into the evidence "
        "store. Files already there are kept; repeat it freely."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--since", required=True, help="first finish day (UTC), YYYY-MM-DD")
        parser.add_argument("--until", default=None, help="last finish day (UTC), inclusive")

    def handle(self, *args: Any, **options: Any) -> None:
        since = _day(options["since"])
        until = _day(options["until"]) if options["until"] else None
        if until is not None and until < since:
            raise CommandError("--until is before --since")
        done = export_facts(since=since, until=until)
        rows = ", ".join(f"{table} {n}" for table, n in done.rows.items())
        self.stdout.write(
            f"exported {done.runs} run(s): {done.files} file(s) written, {done.skipped} already "
            f"there; rows: {rows}"
        )
