"""Quotes, holds, captures, releases, cancels, refunds and upstream costs, through the services
sampling calls, on real runs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connections, transaction
from django.utils import timezone

from billing import services
from billing.models import (
    EntryKind,
    JournalEntry,
    PendingCapture,
    SampleSettlement,
    SettlementReason,
)
from billing.selectors import available_balance, run_billing, tenant_balances
from evidence.models import Capture
from sampling.models import Run, Sample
from tests.billing.conftest import (
    COLLECTOR,
    COLLECTOR_DEEP,
    OPENAI,
    charge,
    complete,
    fail,
    launch,
    samples,
    tenant,
)
from tests.factories import capture_row

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("prices")]


def _fund(amount: int, slug: str = "acme", key: str = "pay-1") -> None:
    services.top_up(tenant=tenant(slug), amount=amount, currency="USD", idempotency_key=key)


# --- top-up and idempotency -----------------------------------------------------------------


def test_top_up_with_the_same_key_books_once_and_a_different_amount_is_an_error() -> None:
    acme = tenant()
    first = services.top_up(tenant=acme, amount=1000, currency="USD", idempotency_key="p1")
    again = services.top_up(tenant=acme, amount=1000, currency="USD", idempotency_key="p1")
    assert again.pk == first.pk
    with pytest.raises(services.IdempotencyConflict, match="p1"):
        services.top_up(tenant=acme, amount=999, currency="USD", idempotency_key="p1")
    assert available_balance(acme, "USD") == 1000
    assert available_balance(acme, "USD", derived=True) == 1000


def test_amounts_must_be_positive_integers_and_entries_balanced() -> None:
    acme = tenant()
    for bad in (0, -5, 1.5, True):
        with pytest.raises(services.BillingError):
            services.top_up(tenant=acme, amount=bad, currency="USD", idempotency_key="x")  # type: ignore[arg-type]
    with pytest.raises(services.UnbalancedEntry):
        services.post_entry(
            idempotency_key="u",
            kind=EntryKind.ADJUSTMENT,
            legs=[
                (services.funding_account("USD"), 5),
                (services.revenue_account(acme, "USD"), -4),
            ],
        )


# --- quote and reserve ----------------------------------------------------------------------


def test_launch_stores_the_quote_and_holds_estimated_max() -> None:
    _fund(10_000)
    run = launch(questions=2, targets=[COLLECTOR, COLLECTOR_DEEP, OPENAI], repeats=2)
    quote = Run.objects.get(pk=run.pk).quote_snapshot
    assert quote is not None
    # The version in effect: the shipped one, or the later one a migration added platforms to.
    assert quote["price_version"] == services.active_price_version().name
    assert quote["currency"] == "USD"
    assert quote["unit_prices"]["collector"] == {"base": 80, "deep_thinking": 20, "screenshot": 10}
    by_target = {line["target"]: line for line in quote["lines"]}
    # collector takes screenshots (policy optional): 80 + 10; deep thinking adds 20.
    assert by_target["collector|desktop|us|web_search"]["unit_price"] == 90
    assert by_target["collector|desktop|us|deep_thinking"]["unit_price"] == 110
    # openai cannot take screenshots: no screenshot component.
    assert by_target["openai|desktop|us|web_search"]["unit_price"] == 5
    assert quote["estimated_max"] == 4 * (90 + 110 + 5) == 820
    assert available_balance(run.tenant, "USD") == 10_000 - 820
    billing = run_billing(run_id=run.pk)
    assert (billing.reserved, billing.held, billing.awaiting_samples) == (820, 820, 12)


def test_screenshot_policy_none_quotes_no_screenshot() -> None:
    _fund(10_000)
    run = launch(questions=1, targets=[COLLECTOR], screenshot_policy="none")
    assert run.quote_snapshot is not None
    assert run.quote_snapshot["estimated_max"] == 80


def test_launch_is_refused_when_the_available_balance_is_short_and_nothing_is_kept() -> None:
    _fund(100)
    with pytest.raises(services.InsufficientFunds) as caught:
        launch(questions=2, targets=[COLLECTOR], repeats=1)  # 180 needed
    message = str(caught.value)
    assert "'acme'" in message and "1.00 USD" in message and "1.80 USD" in message
    assert (caught.value.available, caught.value.required) == (100, 180)
    assert isinstance(caught.value, ValueError)
    assert not Run.objects.exists()
    assert available_balance(tenant(), "USD") == 100


def test_a_price_version_not_yet_in_effect_is_not_active() -> None:
    with pytest.raises(services.NoActivePrice, match="no price version is in effect"):
        services.active_price_version(at=timezone.now().replace(year=2000))


def test_a_price_change_after_launch_changes_nothing_in_the_run() -> None:
    _fund(10_000)
    run = launch(questions=1, targets=[COLLECTOR])
    services.create_price_version(
        name="expensive",
        currency="USD",
        prices={"collector": {"base": 999}},
        effective_from=timezone.now() - timedelta(seconds=1),
    )
    assert services.active_price_version().name == "expensive"
    (sample,) = samples(run)
    complete(sample)
    charge(sample)
    settlement = SampleSettlement.objects.get(sample=sample)
    assert (settlement.reserved, settlement.captured) == (90, 90)
    second = launch(questions=1, targets=[COLLECTOR], name="second")
    assert second.quote_snapshot is not None
    assert second.quote_snapshot["price_version"] == "expensive"


@pytest.mark.django_db(transaction=True)
def test_reserving_a_run_leaves_its_tenant_row_unlocked() -> None:
    """Ledger entries check their tenant key at commit, after the chain lock: a launch that
    locked the tenant before taking the chain lock could deadlock with them."""
    _fund(10_000)
    run = launch(questions=1, targets=[COLLECTOR])
    Run.objects.filter(pk=run.pk).update(quote_snapshot=None)  # reserve anew
    with transaction.atomic():
        services.quote_and_reserve(run=run)
        other = connections.create_connection("default")
        try:
            with other.cursor() as cursor:  # raises LockNotAvailable if the launch locked it
                cursor.execute(
                    "SELECT id FROM sampling_tenant WHERE id = %s FOR KEY SHARE NOWAIT",
                    [run.tenant_id],
                )
                assert cursor.fetchone() == (run.tenant_id,)
        finally:
            other.close()


def test_quote_and_reserve_twice_holds_once() -> None:
    _fund(10_000)
    run = launch(questions=1, targets=[COLLECTOR])
    services.quote_and_reserve(run=run)
    assert JournalEntry.objects.filter(run=run, kind=EntryKind.RESERVE).count() == 1
    assert available_balance(run.tenant, "USD") == 10_000 - 90


# --- capture, settle, cancel ----------------------------------------------------------------


def test_capture_twice_books_once_and_undelivered_screenshot_is_released() -> None:
    _fund(10_000)
    run = launch(questions=2, targets=[COLLECTOR])
    first, second = samples(run)
    complete(first)
    complete(second, screenshot=False)
    for _ in range(2):
        charge(first)
        charge(second)
    assert JournalEntry.objects.filter(run=run, kind=EntryKind.CAPTURE).count() == 2
    billing = run_billing(run_id=run.pk)
    assert billing.captured == 90 + 80
    assert billing.released_unused == 10
    assert billing.held == 0 and billing.balanced
    assert available_balance(run.tenant, "USD") == 10_000 - 180 + 10


def test_a_queued_charge_of_an_unfinished_sample_charges_nothing_and_is_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _fund(10_000)
    run = launch(questions=1, targets=[COLLECTOR])
    (sample,) = samples(run)
    assert charge(sample) == 0
    assert not JournalEntry.objects.filter(run=run, kind=EntryKind.CAPTURE).exists()
    assert not PendingCapture.objects.exists()
    assert f"sample {sample.pk} is not completed; not charged" in caplog.text
    assert run_billing(run_id=run.pk).held == 90


def test_settle_keeps_completed_failed_invalid_and_awaiting_apart() -> None:
    _fund(10_000)
    run = launch(questions=5, targets=[COLLECTOR])  # 5 x 90 held
    done, missed, failed, invalid, waiting = samples(run)
    complete(done)
    charge(done)
    complete(missed)  # completed and valid, but its queued charge was lost
    fail(failed, accepted=True)
    complete(invalid, valid=False)
    Sample.objects.filter(pk=waiting.pk).update(submission_state="uncertain")

    outcome = services.settle_run(run_id=run.pk)
    services.settle_run(run_id=run.pk)  # a repeated delivery books nothing

    assert outcome.captured == [missed.pk]
    assert outcome.released == {SettlementReason.FAILED: 90, SettlementReason.INVALID: 90}
    assert outcome.awaiting == [waiting.pk]
    billing = run_billing(run_id=run.pk)
    assert (billing.captured, billing.released_failed, billing.released_invalid) == (180, 90, 90)
    assert (billing.held, billing.awaiting_samples, billing.awaiting_accepted_samples) == (90, 1, 1)
    assert billing.balanced
    assert JournalEntry.objects.filter(run=run, kind=EntryKind.RELEASE).count() == 1

    # The uncertain sample turns out failed: a later settle releases it.
    fail(waiting, accepted=True)
    services.settle_run(run_id=run.pk)
    billing = run_billing(run_id=run.pk)
    assert (billing.held, billing.released_failed, billing.balanced) == (0, 180, True)
    assert available_balance(run.tenant, "USD") == 10_000 - 180


def test_cancel_releases_only_what_the_upstream_never_accepted() -> None:
    _fund(10_000)
    run = launch(questions=4, targets=[COLLECTOR])
    planned, accepted, uncertain, done = samples(run)
    Sample.objects.filter(pk=accepted.pk).update(submission_state="accepted")
    Sample.objects.filter(pk=uncertain.pk).update(submission_state="uncertain")
    complete(done)
    charge(done)

    services.release_unaccepted_hold(run_id=run.pk)
    services.release_unaccepted_hold(run_id=run.pk)

    billing = run_billing(run_id=run.pk)
    assert billing.released_cancelled == 90
    assert billing.held == 180  # accepted + uncertain stay held
    assert SampleSettlement.objects.get(sample=planned).reason == SettlementReason.CANCELLED
    # A capture arriving for a released sample charges nothing.
    complete(planned)
    charge(planned)
    assert SampleSettlement.objects.get(sample=planned).captured == 0
    # The accepted one completes after the cancel: it is charged.
    complete(accepted)
    charge(accepted)
    assert run_billing(run_id=run.pk).captured == 180


# --- refunds --------------------------------------------------------------------------------


def test_refund_is_its_own_entry_and_never_exceeds_what_was_captured() -> None:
    _fund(10_000)
    run = launch(questions=2, targets=[COLLECTOR])
    first, _ = samples(run)
    complete(first)
    charge(first)
    acme = run.tenant
    with pytest.raises(services.BillingError, match="exceeds"):
        services.refund(tenant=acme, amount=91, currency="USD", idempotency_key="r1", run=run)
    entry = services.refund(tenant=acme, amount=40, currency="USD", idempotency_key="r1", run=run)
    again = services.refund(tenant=acme, amount=40, currency="USD", idempotency_key="r1", run=run)
    assert again.pk == entry.pk and entry.kind == EntryKind.REFUND
    with pytest.raises(services.BillingError, match="exceeds"):
        services.refund(tenant=acme, amount=51, currency="USD", idempotency_key="r2", run=run)
    services.refund(tenant=acme, amount=50, currency="USD", idempotency_key="r2", run=run)
    billing = run_billing(run_id=run.pk)
    assert (billing.captured, billing.refunded) == (90, 90)
    (usd,) = tenant_balances(acme)
    assert (usd.charged, usd.refunded, usd.held) == (0, 90, 90)


# --- upstream costs -------------------------------------------------------------------------


def _capture_row(
    sample: Sample, *, revision: int = 1, cost: int | None = 42, upstream_id: str = ""
) -> Capture:
    return capture_row(
        sample=sample,
        revision=revision,
        attempt_no=1,
        upstream_id=upstream_id or f"task-{sample.pk}",
        collection_state="completed",
        upstream_cost=cost,
        upstream_cost_currency="USD" if cost else "",
        captured_at=timezone.now(),
    )


def test_upstream_cost_is_recorded_once_per_upstream_task() -> None:
    _fund(10_000)
    run = launch(questions=1, targets=[COLLECTOR])
    (sample,) = samples(run)
    first = _capture_row(sample)
    repair = _capture_row(sample, revision=2)  # a repair revision of the same task
    services.record_upstream_cost(capture_id=first.pk)
    services.record_upstream_cost(capture_id=first.pk)
    services.record_upstream_cost(capture_id=repair.pk)
    entries = JournalEntry.objects.filter(kind=EntryKind.UPSTREAM_COST)
    assert entries.count() == 1
    assert entries.get().upstream_id == f"task-{sample.pk}"
    assert run_billing(run_id=run.pk).upstream_costs == {"USD": 42}
    no_cost = _capture_row(sample, revision=3, cost=None)
    assert services.record_upstream_cost(capture_id=no_cost.pk) is None


def test_reversal_mirrors_the_original_and_leaves_it_untouched() -> None:
    acme = tenant()
    original = services.top_up(tenant=acme, amount=300, currency="USD", idempotency_key="p")
    reversal = services.reverse_entry(entry=original, idempotency_key="rev-p")
    assert reversal.reverses_id == original.pk
    assert available_balance(acme, "USD") == 0
    assert sorted(p.amount for p in original.postings.all()) == [-300, 300]


def test_a_launch_rolled_back_for_other_reasons_leaves_no_hold() -> None:
    _fund(10_000)
    with pytest.raises(RuntimeError), transaction.atomic():
        launch(questions=1, targets=[COLLECTOR])
        raise RuntimeError("launch failed after reserve")
    assert available_balance(tenant(), "USD") == 10_000
