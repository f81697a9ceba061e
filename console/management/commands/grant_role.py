"""python manage.py grant_role USERNAME TENANT_SLUG ROLE [--password-env VAR]"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenancy.command_passwords import password_from_env
from tenancy.models import Tenant
from tenancy.roles import ROLES
from tenancy.services import grant_role


class Command(BaseCommand):
    help = (
        "Give USERNAME the ROLE (operator, analyst, finance) in tenant TENANT_SLUG: creates the "
        "staff user if missing (no password unless --password-env names a variable holding "
        "one), adds the role's group and the membership. Idempotent."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("tenant_slug")
        parser.add_argument("role")
        parser.add_argument(
            "--password-env", default=None, help="environment variable holding the password"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        role = options["role"]
        if role not in ROLES:
            raise CommandError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
        tenant = Tenant.objects.filter(slug=options["tenant_slug"]).first()
        if tenant is None:
            raise CommandError(
                f"unknown tenant {options['tenant_slug']!r}; create it with "
                "`manage.py create_tenant SLUG --name NAME`"
            )
        password = password_from_env(options["password_env"], username=options["username"])
        outcome = grant_role(
            username=options["username"], tenant=tenant, role=role, password=password
        )
        self.stdout.write(outcome)
