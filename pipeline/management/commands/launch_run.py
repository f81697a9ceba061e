"""python manage.py launch_run CAMPAIGN.json [--submission-limit N] [--dry-run]"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from billing.selectors import available_balance
from billing.services import BillingError, format_amount
from connectors import safejson
from connectors.safejson import JsonTooDeep
from pipeline.launch import fetch_provider_quotes, launch_run
from pipeline.preview import quote_for_spec
from sampling.planning import PlanError, parse_campaign_spec
from sampling.services import preview_plan, save_campaign
from sampling.snapshots import Quote
from tenancy.models import Tenant


class Command(BaseCommand):
    help = "Create or update a campaign from a JSON file and launch a run (or preview it)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("campaign_file", type=Path)
        parser.add_argument("--submission-limit", type=int, default=None)
        parser.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        data = _read_json(options["campaign_file"])
        limit = options["submission_limit"]
        try:
            spec = parse_campaign_spec(data, submission_limit=limit)
        except PlanError as error:
            raise CommandError("invalid campaign:\n  " + "\n  ".join(error.problems)) from None
        tenant = Tenant.objects.filter(slug=spec.tenant).first()
        if tenant is None:
            raise CommandError(
                f"unknown tenant {spec.tenant!r}: create it first with "
                f"`manage.py create_tenant {spec.tenant} --name NAME`"
            )
        summary: dict[str, Any] = {"run_id": None, **preview_plan(spec=spec).as_dict()}
        try:
            # The quote launch will freeze, shown for --dry-run exactly as the console shows it.
            summary.update(_quote_summary(quote_for_spec(spec), tenant))
            if not options["dry_run"]:
                quotes = fetch_provider_quotes(spec)  # asked before the transaction
                with transaction.atomic():
                    campaign = save_campaign(spec=spec)
                    run = launch_run(
                        campaign=campaign, submission_limit=limit, provider_quotes=quotes
                    )
                summary["run_id"] = str(run.pk)
        except (PlanError, BillingError) as error:  # no price, no funds: one line, nothing written
            raise CommandError(str(error)) from None
        summary["dry_run"] = options["dry_run"]
        self.stdout.write(json.dumps(summary, ensure_ascii=False, indent=2))


def _quote_summary(quote: Quote, tenant: Tenant) -> dict[str, Any]:
    currency = quote.currency
    available = available_balance(tenant, currency)
    return {
        "quote": quote.to_json(),
        "estimated_max": format_amount(quote.estimated_max, currency),
        "available_balance": format_amount(available, currency),
        "funds_sufficient": available >= quote.estimated_max,
    }


def _read_json(path: Path) -> Any:
    try:
        return safejson.loads(path.read_bytes())
    except FileNotFoundError:
        raise CommandError(f"{path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise CommandError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise CommandError(
            f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except JsonTooDeep as exc:
        raise CommandError(f"{path}: {exc}") from None
