"""python manage.py demo — a demo campaign end to end on the embedded default.

Starts the platform simulator (with injected faults), launches the demo campaign, runs a real
Celery worker process and the dispatcher process under a supervisor until the run is finished
(a child that dies is restarted; no progress for --stall-seconds fails with the children's
last log lines), then prints the run's status, a mention-rate table per platform with its
denominators, the brand's sentiment and head-to-head, and its money in major units.

`--campaign FILE` runs any campaign file the same way: the simulator's answers are about that
campaign's brand and competitors (simulator/content.py), so a brand of one's own gets a report
that says something (demo/your_brand.json is an example).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from analysis.report_exports import render_report
from analysis.reports import RunReport, build_run_report
from billing.selectors import run_billing
from billing.services import ensure_default_price_version, format_amount, top_up
from geo_collect.processes import (
    ManagedProcess,
    Stalled,
    demo_supervisor,
)
from pipeline.launch import launch_run
from pipeline.review import abandon_parked_uncertain
from sampling.buckets import OUTCOMES
from sampling.leases import end_all_leases
from sampling.models import Run
from sampling.planning import PlanError, parse_campaign_spec
from sampling.selectors import Status, last_sample_change, run_status
from sampling.services import save_campaign
from simulator import start_simulator
from simulator.content import entities_of_campaign
from tenancy.models import Tenant

DEMO_CAMPAIGN = Path(__file__).resolve().parents[2] / "campaign.json"
PROGRESS_EVERY_SECONDS = 5.0
DEMO_CREDIT = 1_000_000  # minor units topped up for the demo tenant

# Faults injected into the simulator so the demo shows recovery, not only the happy path.
DEMO_FAULTS: dict[str, Any] = {
    "rates": {"rate_limit": 0.08, "server_error": 0.05, "truncate": 0.04, "login_page": 0.02},
    "retry_after_seconds": 0.5,
    "platforms": {
        "collector": {"rates": {"screenshot_missing": 0.15, "task_failed": 0.03}},
    },
}


def _worker_restarted(child: ManagedProcess) -> None:
    """The demo has one worker: what it held died with it, so its leases end now instead of
    after the lease time."""
    if child.name == "worker":
        end_all_leases()


class Command(BaseCommand):
    help = "Run the demo campaign end to end on the embedded default and print its report."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--campaign", type=Path, default=DEMO_CAMPAIGN)
        parser.add_argument("--seed", type=int, default=7)
        # A loaded machine is slow, not stuck: the stall limit, not the timeout, catches a hang.
        parser.add_argument("--timeout", type=float, default=3600.0)
        parser.add_argument("--workers", type=int, default=8, help="worker threads")
        parser.add_argument("--stall-seconds", type=float, default=150.0)

    def handle(self, *args: Any, **options: Any) -> None:
        call_command("migrate", verbosity=0)
        data = json.loads(options["campaign"].read_text(encoding="utf-8"))
        simulator = start_simulator(seed=options["seed"], profile=DEMO_FAULTS)
        # What `POST /_sim/entities` does: the answers are about this campaign's entities.
        simulator.register_entities(*entities_of_campaign(data), replace=True)
        os.environ["GEO_UPSTREAM_BASE_URL"] = simulator.base_url
        settings.GEO_UPSTREAM_BASE_URL = simulator.base_url
        supervisor = demo_supervisor(
            threads=options["workers"],
            stall_seconds=options["stall_seconds"],
            env={"GEO_UPSTREAM_BASE_URL": simulator.base_url},
            say=self.stdout.write,
            on_restart=_worker_restarted,
        )
        try:
            run = self._launch(data)
            self.stdout.write(
                f"launched run {run.pk}: {run.planned_samples} samples "
                f"against the simulator at {simulator.base_url}"
            )
            supervisor.start()
            finished = supervisor.run_until(self._progress(run), timeout=options["timeout"])
        except Stalled as stalled:
            raise CommandError(str(stalled)) from None
        finally:
            supervisor.stop()
            simulator.stop()
        status = run_status(run_id=run.pk)
        self._report(run, status)
        if not finished:
            raise CommandError(
                supervisor.report(f"run {run.pk} did not finish within {options['timeout']:.0f}s")
            )

    def _launch(self, data: dict[str, Any]) -> Run:
        try:
            spec = parse_campaign_spec(data)
        except PlanError as error:
            raise CommandError("invalid demo campaign: " + "; ".join(error.problems)) from None
        with transaction.atomic():
            # The demo plays the administrator who creates its tenant; launching never does.
            Tenant.objects.get_or_create(slug=spec.tenant, defaults={"name": spec.tenant})
            campaign = save_campaign(spec=spec)
            version = ensure_default_price_version()
            top_up(
                tenant=campaign.tenant,
                amount=DEMO_CREDIT,
                currency=version.currency,
                idempotency_key=f"demo-credit-{uuid.uuid4()}",  # each demo brings its credit
            )
            return launch_run(campaign=campaign)

    def _progress(self, run: Run) -> Callable[[], tuple[bool, Hashable]]:
        """Prints the run's progress every few seconds; work moved when a sample changed. Done
        once the run is finished and settled (its end event went through the outbox)."""
        next_print = 0.0

        def check() -> tuple[bool, Hashable]:
            nonlocal next_print
            self._act_as_reviewer(run)
            status = run_status(run_id=run.pk)
            if status.finished or time.monotonic() >= next_print:
                self.stdout.write(f"  {status.terminal}/{status.planned} done — {_buckets(status)}")
                next_print = time.monotonic() + PROGRESS_EVERY_SECONDS
            settled = status.finished and not run_billing(run_id=run.pk).held
            return settled, (status.terminal, last_sample_change(run_id=run.pk))

        return check

    def _act_as_reviewer(self, run: Run) -> None:
        """A worker killed mid-submit on a direct API leaves its sample uncertain, parked for a
        person (docs/decisions.md). The demo is that person: it keeps such samples as failed
        placeholders, so the run ends with every sample accounted for."""
        note = "demo reviewer: acceptance cannot be confirmed"
        for sample_id in abandon_parked_uncertain(run_ids=[run.pk], note=note):
            self.stdout.write(
                f"  sample {sample_id} uncertain (its worker died mid-submit): kept as a failed "
                "placeholder, as `manage.py resolve_uncertain --as abandon` would"
            )

    def _report(self, run: Run, status: Status) -> None:
        self._status(run, status)
        self._mention_tables(run)
        self._billing(run)

    def _billing(self, run: Run) -> None:
        money = run_billing(run_id=run.pk)
        currency = money.currency or ensure_default_price_version().currency

        def amount(minor: int) -> str:
            return format_amount(minor, currency)

        out = self.stdout.write
        out("")
        out(f"Billing (price list {money.price_version})")
        out(
            f"  held at launch {amount(money.reserved)} = charged {amount(money.captured)}"
            f" + released {amount(money.released)} + still held {amount(money.held)}"
        )
        out(
            f"  released: parts of answers not delivered {amount(money.released_unused)}, "
            f"failed {amount(money.released_failed)}, invalid "
            f"{amount(money.released_invalid)}, cancelled {amount(money.released_cancelled)}"
        )
        costs = ", ".join(format_amount(v, c) for c, v in money.upstream_costs.items()) or "none"
        out(f"  samples charged {money.samples_charged}; upstream costs reported: {costs}")

    def _status(self, run: Run, status: Status) -> None:
        out = self.stdout.write
        out("")
        out(f"Run {run.pk} — {status.outcome.value}")
        out(f"  planned {status.planned} = {_buckets(status, joiner=' + ')}")
        if status.review:
            waits = "answer waits" if status.review == 1 else "answers wait"
            out(
                f"  review: {status.review} {waits} for a person (Evidence › Review queue in "
                "the console, `manage.py resolve_uncertain` for uncertain ones)"
            )
        out(
            "Samples per layer (each sample has a state in every layer; a sample that failed "
            "before a layer keeps that layer's first state, e.g. submission planned = never "
            "sent to the platform):"
        )
        for layer, counts in status.layers.items():
            out(f"  {layer:<11} " + ", ".join(f"{k} {v}" for k, v in counts.items()))

    def _mention_tables(self, run: Run) -> None:
        """From the auditable report: it refuses to exist unless the counts are conserved and
        a record scan agrees with the SQL aggregates."""
        out = self.stdout.write
        report = build_run_report(run_id=run.pk, with_trend=False)
        for entity in report.entities:
            out("")
            out(f"Mention rate of {entity} (denominator: planned samples; 95% Wilson interval)")
            out(
                f"  {'platform':<12}{'planned':>8}{'ok':>5}{'failed':>7}{'invalid':>8}"
                f"{'review':>7}{'mentioned':>10}{'rate':>8}  95% CI"
            )
            for row in report.by_platform:
                c, r = row.counts, row.entity_mention_rates[entity]
                value = "n/a" if r.value is None else f"{r.value:.1%}"
                out(
                    f"  {row.label:<12}{c.planned:>8}{c.succeeded:>5}{c.failed:>7}{c.invalid:>8}"
                    f"{c.review:>7}{r.successes:>10}{value:>8}  [{r.low:.1%}, {r.high:.1%}]"
                )
        self._brand_summary(report)
        html = settings.VAR_DIR / f"report-{run.pk}.html"
        html.write_bytes(render_report(report, "html"))
        data = settings.VAR_DIR / f"report-{run.pk}.json"
        data.write_bytes(render_report(report, "json"))
        out("")
        out(f"Checks passed: {', '.join(c.name for c in report.checks)}")
        out(f"Full report (share of voice, ranks, cited domains): {html}")
        out(f"The same as JSON: {data}")

    def _brand_summary(self, report: RunReport) -> None:
        out = self.stdout.write
        for stat in report.sentiment:
            shares = ", ".join(
                f"{name} {share.value:.0%}" for name, share in stat.shares.items() if share.value
            )
            out("")
            out(f"Sentiment of {stat.entity} (n={stat.mentioned} mentions): {shares or 'n/a'}")
        pairs: dict[str, list[int]] = {}
        for row in report.head_to_head:
            both, brand_only, competitor_only = pairs.setdefault(row.competitor, [0, 0, 0])
            pairs[row.competitor] = [
                both + row.both,
                brand_only + row.brand_only,
                competitor_only + row.competitor_only,
            ]
        if pairs:
            out("")
            out(f"Head-to-head of {report.brand} (answers naming both / only the brand / only it)")
        for competitor, (both, brand_only, competitor_only) in pairs.items():
            out(f"  vs {competitor:<20} {both:>5} / {brand_only:>5} / {competitor_only:>5}")


def _buckets(status: Status, *, joiner: str = ", ") -> str:
    """Every outcome bucket (sampling/buckets.py) by name: they add up to the planned count."""
    return joiner.join(f"{bucket.name} {getattr(status, bucket.name)}" for bucket in OUTCOMES)
