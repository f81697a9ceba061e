"""Sign the ledger chain's head and store it outside the database (billing/checkpoints.py)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from billing.checkpoints import write_checkpoint


class Command(BaseCommand):
    help = (
        "Write a signed checkpoint of the ledger chain's head to the evidence store (for cron; "
        "the dispatcher writes one every GEO_LEDGER_CHECKPOINT_MINUTES). Exits 1 when the "
        "ledger no longer holds the previous checkpoint's head."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        checkpoint = write_checkpoint()
        if checkpoint is None:
            raise CommandError("no checkpoint written: the ledger is empty or fails check_ledger")
        self.stdout.write(f"ledger checkpoint: entry #{checkpoint.entry_id} ({checkpoint.key})")
