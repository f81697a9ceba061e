"""python manage.py grant_platform_finance USERNAME [--password-env VAR]"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from tenancy.command_passwords import password_from_env
from tenancy.services import grant_platform_finance


class Command(BaseCommand):
    help = (
        "Make USERNAME the platform operator's finance: imports, reads and voids provider "
        "statements (a tenant's finance does not). Creates the staff user if missing (no "
        "password unless --password-env names a variable holding one). Idempotent."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument(
            "--password-env", default=None, help="environment variable holding the password"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        password = password_from_env(options["password_env"], username=options["username"])
        self.stdout.write(grant_platform_finance(username=options["username"], password=password))
