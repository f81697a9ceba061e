"""python manage.py top_up TENANT_SLUG AMOUNT --currency USD --key KEY"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from billing.services import (
    DEFAULT_CURRENCY,
    BillingError,
    format_amount,
    parse_amount,
    top_up,
    was_replayed,
)
from tenancy.models import Tenant


class Command(BaseCommand):
    help = (
        "Credit a tenant's available balance. AMOUNT in major units (250.00); KEY is the "
        "payment's reference: the same KEY never books twice."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("tenant_slug")
        parser.add_argument("amount", help="major units, e.g. 250.00")
        parser.add_argument("--currency", default=DEFAULT_CURRENCY)
        parser.add_argument("--key", required=True, help="idempotency key (payment reference)")

    def handle(self, *args: Any, **options: Any) -> None:
        tenant = Tenant.objects.filter(slug=options["tenant_slug"]).first()
        if tenant is None:
            raise CommandError(f"unknown tenant {options['tenant_slug']!r}")
        try:
            amount = parse_amount(options["amount"], options["currency"])
            currency = options["currency"].upper()
            entry = top_up(
                tenant=tenant,
                amount=amount,
                currency=currency,
                idempotency_key=options["key"],
                memo="top-up from the command line",
            )
        except BillingError as error:
            raise CommandError(str(error)) from None
        if was_replayed(entry):
            self.stdout.write(
                f"{tenant.slug}: already credited: key {options['key']} is entry {entry.pk}; "
                "nothing was booked again"
            )
            return
        self.stdout.write(
            f"{tenant.slug}: {format_amount(amount, currency)} credited (entry {entry.pk}, "
            f"key {options['key']})"
        )
