"""Import a provider's CSV cost statement for reconciliation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from billing.reconciliation import StatementError, import_statement, max_statement_bytes


class Command(BaseCommand):
    help = (
        "Import an upstream provider's CSV statement, the provider's bill to the platform "
        "(columns: upstream_id, amount in major units such as 0.90 or amount_minor in minor "
        "units, currency, occurred_at ISO 8601 with zone). All or nothing; every bad row is "
        "named. Importing the same file twice under one provider changes nothing; a mistaken "
        "statement is voided with void_statement."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path)
        parser.add_argument(
            "--provider",
            required=True,
            help="configured platform key of the provider, e.g. collector",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["path"]
        try:
            if path.stat().st_size > max_statement_bytes():
                raise CommandError(
                    f"{path.name}: over the {max_statement_bytes()}-byte limit; nothing imported"
                )
            content = path.read_bytes()
        except OSError as error:
            raise CommandError(f"cannot read {path}: {error}") from None
        try:
            result = import_statement(
                provider=options["provider"],
                filename=path.name,
                content=content,
                imported_by="manage.py import_statement",
            )
        except StatementError as error:
            for problem in error.problems:
                self.stderr.write(f"{path.name}: {problem}")
            raise CommandError(
                f"{path.name}: {len(error.problems)} problem(s); nothing imported"
            ) from None
        if not result.created:
            self.stdout.write(f"{path.name}: already imported as statement #{result.statement.pk}")
            return
        self.stdout.write(
            f"{path.name}: statement #{result.statement.pk}: {result.imported} line(s) imported, "
            f"{result.already_known} already known from earlier statements"
        )
