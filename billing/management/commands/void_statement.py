"""python manage.py void_statement STATEMENT_ID --reason TEXT"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from billing.reconciliation import StatementError, void_statement


class Command(BaseCommand):
    help = (
        "Void a mistaken provider statement: a correction is appended (nothing is deleted), "
        "its lines stop counting in reconciliation, and the right file can be imported."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("statement_id", type=int)
        parser.add_argument("--reason", required=True, help="why the statement is wrong")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            void = void_statement(
                statement_id=options["statement_id"],
                reason=options["reason"],
                voided_by="manage.py void_statement",
            )
        except StatementError as error:
            raise CommandError(str(error)) from None
        self.stdout.write(f"statement #{void.statement_id} voided: {void.reason}")
