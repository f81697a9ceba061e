"""Reconciliation by upstream task id, statement import, adjustments, exports, check_ledger."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone
from openpyxl import load_workbook

from billing import exports, services
from billing.checks import verify_ledger
from billing.models import EntryKind, JournalEntry, UpstreamStatementLine
from billing.reconciliation import (
    AMOUNT_MISMATCH,
    MATCHED,
    MISSING_OURS,
    MISSING_UPSTREAM,
    StatementError,
    import_statement,
    reconcile,
    settle_differences,
)
from tests.billing.conftest import COLLECTOR, charge, complete, launch, samples, tenant
from tests.factories import capture_row

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("prices")]

NOW = "2026-11-11T02:00:00Z"


def _run_with_costs(costs: list[int | None]):  # type: ignore[no-untyped-def]
    services.top_up(tenant=tenant(), amount=100_000, currency="USD", idempotency_key="p")
    run = launch(questions=len(costs), targets=[COLLECTOR])
    for sample, cost in zip(samples(run), costs, strict=True):
        complete(sample)
        charge(sample)
        capture = capture_row(
            sample=sample,
            revision=1,
            attempt_no=1,
            upstream_id=f"task-{sample.pk}",
            collection_state="completed",
            upstream_cost=cost,
            upstream_cost_currency="USD" if cost else "",
            captured_at=timezone.now(),
        )
        services.record_upstream_cost(capture_id=capture.pk)
    return run, samples(run)


def _statement(rows: list[str], name: str = "s.csv") -> bytes:
    return ("upstream_id,amount,currency,occurred_at\n" + "\n".join(rows) + "\n").encode()


def test_statuses_and_adjustments_by_upstream_task_id() -> None:
    run, (a, b, c) = _run_with_costs([40, 50, 60])
    import_statement(
        provider="collector",
        filename="nov.csv",
        content=_statement(
            [
                f"task-{a.pk},0.40,USD,{NOW}",
                f"task-{b.pk},0.55,USD,{NOW}",
                f"ghost-1,0.25,USD,{NOW}",
            ]
        ),
    )
    report = reconcile(run_id=run.pk)
    by_id = {r.upstream_id: r for r in report.rows}
    assert by_id[f"task-{a.pk}"].status == MATCHED
    assert by_id[f"task-{a.pk}"].charge == 90
    assert by_id[f"task-{b.pk}"].status == AMOUNT_MISMATCH
    assert by_id[f"task-{b.pk}"].difference == 5
    assert by_id[f"task-{c.pk}"].status == MISSING_UPSTREAM
    assert "ghost-1" not in by_id  # not this run's task

    period = reconcile(start=timezone.now() - timedelta(days=3650), platform="collector")
    assert {r.upstream_id: r.status for r in period.rows}["ghost-1"] == MISSING_OURS

    entries = settle_differences(report=period)
    again = settle_differences(report=period)
    assert [e.pk for e in entries] == [e.pk for e in again]
    assert all(e.kind == EntryKind.ADJUSTMENT for e in entries)
    after = {r.upstream_id: r.status for r in reconcile(platform="collector").rows}
    assert after[f"task-{b.pk}"] == MATCHED and after["ghost-1"] == MATCHED
    assert after[f"task-{c.pk}"] == MISSING_UPSTREAM
    assert verify_ledger().ok


def test_malformed_statement_rows_are_each_named_and_nothing_is_imported() -> None:
    content = _statement(
        [
            f"t1,10,USD,{NOW}",
            "t2,1.555,USD,2026-11-11T02:00:00Z",
            ",10,USD,2026-11-11T02:00:00Z",
            "t3,10,US,2026-11-11T02:00:00Z",
            "t4,10,USD,yesterday",
            "t5,10,USD,2026-11-11T02:00:00",
            f"t1,10,USD,{NOW}",
        ]
    )
    with pytest.raises(StatementError) as caught:
        import_statement(provider="collector", filename="bad.csv", content=content)
    assert caught.value.problems == [
        "row 3: amount: '1.555': USD amounts in major units have at most 2 decimals (e.g. 250.00)",
        "row 4: upstream_id: must not be empty",
        "row 5: currency: 'US' is not a three-letter currency code like USD",
        "row 6: occurred_at 'yesterday' is not an ISO 8601 date-time",
        "row 7: occurred_at '2026-11-11T02:00:00' has no time zone",
        "row 8: upstream_id 't1' repeats row 2",
    ]
    assert not UpstreamStatementLine.objects.exists()
    with pytest.raises(StatementError, match="missing column"):
        import_statement(provider="collector", filename="h.csv", content=b"id,amount\n1,2\n")


def test_import_is_idempotent_and_a_changed_amount_for_a_known_task_is_an_error() -> None:
    first = import_statement(
        provider="collector", filename="a.csv", content=_statement([f"t1,10,USD,{NOW}"])
    )
    same = import_statement(
        provider="collector", filename="a.csv", content=_statement([f"t1,10,USD,{NOW}"])
    )
    assert first.created and not same.created and same.statement.pk == first.statement.pk
    overlap = import_statement(
        provider="collector",
        filename="b.csv",
        content=_statement([f"t1,10,USD,{NOW}", f"t2,7,USD,{NOW}"]),
    )
    assert (overlap.imported, overlap.already_known) == (1, 1)
    with pytest.raises(StatementError, match=r"imported before with 10\.00 USD"):
        import_statement(
            provider="collector", filename="c.csv", content=_statement([f"t1,11,USD,{NOW}"])
        )


def test_import_statement_command_reports_rows_and_exits_non_zero(tmp_path) -> None:  # type: ignore[no-untyped-def]
    good = tmp_path / "good.csv"
    good.write_bytes(_statement([f"t1,10,USD,{NOW}"]))
    out = io.StringIO()
    call_command("import_statement", str(good), provider="collector", stdout=out)
    assert "1 line(s) imported" in out.getvalue()
    bad = tmp_path / "bad.csv"
    bad.write_bytes(_statement(["t9,abc,USD,2026-11-11T02:00:00Z"]))
    err = io.StringIO()
    with pytest.raises(CommandError, match="nothing imported"):
        call_command("import_statement", str(bad), provider="collector", stderr=err)
    assert "row 2: amount: 'abc'" in err.getvalue()


def test_csv_and_xlsx_exports() -> None:
    run, (a,) = _run_with_costs([40])
    import_statement(
        provider="collector", filename="x.csv", content=_statement([f"task-{a.pk},0.40,USD,{NOW}"])
    )
    report = reconcile(run_id=run.pk)
    text = exports.reconciliation_csv(report)
    header, line = text.strip().splitlines()
    assert header == (
        "platform,upstream_id,run_id,sample_id,status,charge,charge_currency,recorded_cost,"
        "recorded_cost_currency,statement_cost,statement_cost_currency,difference,"
        "difference_currency"
    )
    # Major units, each amount with its currency: a 90-cent charge is 0.90 USD, not "90".
    assert f"collector,task-{a.pk},{run.pk},{a.pk},matched,0.90,USD,0.40,USD,0.40,USD,0.00,USD" == (
        line
    )
    book = load_workbook(io.BytesIO(exports.reconciliation_xlsx(report)))
    assert book.sheetnames == ["reconciliation", "summary", "scope"]
    charge_cell = book["reconciliation"].cell(row=2, column=6)
    assert (charge_cell.value, charge_cell.number_format) == (0.9, "0.00")
    assert book["reconciliation"].cell(row=2, column=7).value == "USD"
    ledger = exports.ledger_csv()
    assert "capture:sample:" in ledger and "reserve:run:" in ledger
    assert load_workbook(io.BytesIO(exports.ledger_xlsx()))["ledger"].max_row > 1


def test_check_ledger_passes_on_a_sound_ledger() -> None:
    _run_with_costs([40, 50])
    out = io.StringIO()
    call_command("check_ledger", stdout=out)
    assert out.getvalue().startswith("ledger OK:")


@pytest.mark.postgresql("PostgreSQL trigger control")
def test_check_ledger_exits_non_zero_on_a_violation() -> None:
    _run_with_costs([40])
    # Simulate damage the triggers would refuse (a careless bulk load with triggers off).
    entry = JournalEntry.objects.filter(kind=EntryKind.CAPTURE).first()
    assert entry is not None
    posting = entry.postings.order_by("id").last()
    assert posting is not None
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # fire what is pending first
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute("UPDATE billing_posting SET amount = amount + 1 WHERE id = %s", [posting.pk])
        cursor.execute("SET LOCAL session_replication_role = origin")
    err = io.StringIO()
    with pytest.raises(CommandError, match="violation"):
        call_command("check_ledger", stderr=err)
    assert f"entry #{entry.pk} unbalanced" in err.getvalue()
    assert "settles" in err.getvalue()
