"""python manage.py create_tenant SLUG --name NAME"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from tenancy.models import Tenant


class Command(BaseCommand):
    help = "Create a tenant (idempotent: an existing slug is left as it is and reported)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug")
        parser.add_argument("--name", required=True)

    def handle(self, *args: Any, **options: Any) -> None:
        slug, name = options["slug"].strip(), options["name"].strip()
        if not slug or not name:
            raise CommandError("a tenant needs a non-empty slug and --name")
        tenant, created = Tenant.objects.get_or_create(slug=slug, defaults={"name": name})
        if created:
            self.stdout.write(f"created tenant {tenant.slug} ({tenant.name})")
        else:
            self.stdout.write(f"tenant {tenant.slug} already exists ({tenant.name})")
