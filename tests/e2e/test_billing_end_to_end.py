"""Billing end to end: real worker, simulator provider costs, signed callbacks delivered
twice to the live callback endpoint, a cancellation, then check_ledger and a reconciliation
export a finance user can read."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from django.core.management import call_command

from billing.exports import reconciliation_csv
from billing.reconciliation import (
    AMOUNT_MISMATCH,
    MATCHED,
    MISSING_OURS,
    import_statement,
    reconcile,
    settle_differences,
)
from billing.selectors import run_billing
from pipeline.runs import cancel_run
from sampling.models import CallbackDelivery, Run, Sample
from tests.conftest import launch_funded, make_campaign_data
from tests.e2e.conftest import drive_until_settled

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SECRET = "e2e-callback-secret"
COLLECTOR = [{"platform": "collector", "device": "desktop", "region": "us", "mode": "web_search"}]


def _launch(name: str, questions: list[str]) -> Run:
    data = make_campaign_data(questions=0, targets=COLLECTOR, repeats=1, name=name)
    data["questions"] = questions
    return launch_funded(data)


def test_costs_duplicate_callbacks_and_a_cancel_leave_a_balanced_reconciled_ledger(
    simulator: Any,
    celery_worker: Any,
    worker_env: dict[str, str],
    live_server: Any,
    settings: Any,
) -> None:
    settings.GEO_COLLECTOR_CALLBACK_SECRET = SECRET
    simulator.configure(profile={"collector": {"callback_secret": SECRET, "polls_until_done": 50}})
    simulator.script({"match": "Twice", "fault": "duplicate_callback", "times": None})
    worker_env["GEO_COLLECTOR_CALLBACK_URL"] = f"{live_server.url}/callbacks/collector/"
    run = _launch("billed", [f"Twice {i}: which CRM is best?" for i in range(4)])
    cancelled = _launch("cancelled", [f"Never asked {i}: which CRM?" for i in range(3)])
    assert cancel_run(run_id=cancelled.pk) == 3
    celery_worker()

    status = drive_until_settled(run.pk)

    assert status.finished and status.succeeded == 4, status.as_dict()
    # Polling alone would need 50 polls: each task finished through its callback, which came
    # twice and was acted on once.
    assert CallbackDelivery.objects.count() == 4
    money = run_billing(run_id=run.pk)
    assert money.samples_charged == 4
    assert money.reserved == money.captured + money.released + money.held
    assert money.held == 0
    assert sum(money.upstream_costs.values()) > 0

    never = run_billing(run_id=cancelled.pk)
    assert never.released_cancelled == never.reserved and never.captured == 0
    assert not Sample.objects.filter(run=cancelled).exclude(collection_state="failed").exists()

    call_command("check_ledger")  # exits non-zero (SystemExit) on any violation

    # The provider's statement: three tasks as recorded, one billed 7 more, one we never saw.
    before = reconcile(run_id=run.pk)
    assert before.count("missing_upstream") == 4  # no statement yet
    tasks = sorted((row.upstream_id, row.recorded_cost or 0) for row in before.rows)
    lines = [
        f"{uid},{cost + (7 if i == 0 else 0)},USD,2026-11-29T00:00:00Z"
        for i, (uid, cost) in enumerate(tasks)
    ]
    lines.append("tsk_unknown_to_us,40,USD,2026-11-29T00:00:00Z")
    # Written by a program from our minor units: the labelled machine column.
    statement = "upstream_id,amount_minor,currency,occurred_at\n" + "\n".join(lines) + "\n"
    import_statement(provider="collector", filename="nov.csv", content=statement.encode())

    report = reconcile(platform="collector")
    assert (report.count(MATCHED), report.count(AMOUNT_MISMATCH), report.count(MISSING_OURS)) == (
        3,
        1,
        1,
    )
    rows = list(csv.DictReader(io.StringIO(reconciliation_csv(report))))
    mismatch = next(row for row in rows if row["status"] == AMOUNT_MISMATCH)
    assert (mismatch["difference"], mismatch["difference_currency"]) == ("0.07", "USD")
    assert mismatch["upstream_id"] == tasks[0][0]
    assert all(row["platform"] == "collector" and row["status"] for row in rows)

    # Differences are settled by explicit adjustment entries, never edits; then all match.
    assert len(settle_differences(report=report, memo="November statement")) == 2
    after = reconcile(platform="collector")
    assert after.count(MATCHED) == 5
    call_command("check_ledger")
