"""Verify every ledger invariant over the whole ledger; exit non-zero on any violation."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from billing.checks import verify_ledger


class Command(BaseCommand):
    help = "Verify every ledger invariant over the whole ledger; exits 1 on any violation."

    def handle(self, *args: Any, **options: Any) -> None:
        report = verify_ledger()
        summary = (
            f"{report.entries} entries, {report.postings} postings, {report.accounts} accounts"
        )
        if report.ok:
            self.stdout.write(f"ledger OK: {summary}")
            return
        for violation in report.violations:
            self.stderr.write(f"VIOLATION: {violation}")
        raise CommandError(f"ledger has {len(report.violations)} violation(s) ({summary})")
