"""Charges queued by verdicts and posted per run batch (billing.services.post_pending_captures):
one capture entry for many samples, each charged once, nothing lost when a run finishes."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing import services
from billing.checks import verify_ledger
from billing.costs import book_pending_attempt_costs, queue_attempt_cost
from billing.models import (
    EntryKind,
    JournalEntry,
    PendingAttemptCost,
    PendingCapture,
    SampleSettlement,
)
from billing.selectors import run_billing
from pipeline.runs import finish_run_if_done
from sampling.models import Attempt, Sample
from tests.billing.conftest import COLLECTOR, complete, launch, samples, tenant

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("prices")]


def _queued_run(questions: int = 3) -> tuple[object, list[Sample]]:
    services.top_up(tenant=tenant(), amount=100_000, currency="USD", idempotency_key="pay")
    run = launch(questions=questions, targets=[COLLECTOR])
    done = samples(run)
    for sample in done:
        complete(sample)
        services.queue_capture(run_id=run.pk, sample_id=sample.pk)
    return run, done


def test_queued_charges_post_as_one_capture_entry_with_a_line_per_sample() -> None:
    run, done = _queued_run()
    services.queue_capture(run_id=run.pk, sample_id=done[0].pk)  # a repeat queues nothing
    assert PendingCapture.objects.count() == 3
    assert not JournalEntry.objects.filter(kind=EntryKind.CAPTURE).exists()

    assert services.post_pending_captures() == 3

    (entry,) = JournalEntry.objects.filter(kind=EntryKind.CAPTURE)
    assert entry.sample_id is None and entry.run_id == run.pk
    lines = SampleSettlement.objects.filter(entry=entry)
    assert sorted(line.sample_id for line in lines) == [s.pk for s in done]
    assert not PendingCapture.objects.exists()
    assert run_billing(run_id=run.pk).captured == sum(line.captured for line in lines)
    assert verify_ledger().violations == []


def test_posting_charges_never_reads_the_run_configuration() -> None:
    """It holds the question list (about 100 KB for 1,000 questions), and the dispatcher posts
    charges every second for each running run."""
    _queued_run()

    with CaptureQueriesContext(connection) as queries:
        assert services.post_pending_captures() == 3

    assert not [q["sql"] for q in queries.captured_queries if "config_snapshot" in q["sql"]]


def test_a_sample_charged_already_is_not_charged_again_by_a_later_batch() -> None:
    run, done = _queued_run()
    assert services.post_pending_captures() == 3
    services.queue_capture(run_id=run.pk, sample_id=done[0].pk)  # its verdict, redelivered
    complete(done[1])
    services.queue_capture(run_id=run.pk, sample_id=done[1].pk)

    assert services.post_pending_captures() == 0

    assert SampleSettlement.objects.filter(sample=done[0]).count() == 1
    assert SampleSettlement.objects.filter(reason="completed").count() == 3
    assert JournalEntry.objects.filter(kind=EntryKind.CAPTURE).count() == 1
    assert not PendingCapture.objects.exists()


def test_batches_are_chunked() -> None:
    _queued_run(questions=5)

    assert services.post_pending_captures(limit=2) == 5

    assert JournalEntry.objects.filter(kind=EntryKind.CAPTURE).count() == 3  # 2 + 2 + 1


def test_a_run_finishes_only_with_its_queued_charges_posted() -> None:
    run, done = _queued_run()

    assert finish_run_if_done(run_id=run.pk)

    assert not PendingCapture.objects.exists()
    assert SampleSettlement.objects.filter(sample__in=done, reason="completed").count() == 3


def test_settling_a_run_charges_what_is_still_queued() -> None:
    run, done = _queued_run()

    outcome = services.settle_run(run_id=run.pk)

    assert outcome.captured == []  # posted as queued charges, not as missed ones
    assert SampleSettlement.objects.filter(sample__in=done, reason="completed").count() == 3
    assert run_billing(run_id=run.pk).awaiting_samples == 0


def test_queued_attempt_costs_are_booked_once_per_attempt() -> None:
    run, done = _queued_run(questions=1)
    attempt = Attempt.objects.create(
        sample=done[0],
        attempt_no=1,
        idempotency_key="k1",
        fencing_token=1,
        cost=120,
        cost_currency="USD",
        upstream_id="resp-1",
    )
    queue_attempt_cost(run_id=run.pk, attempt_id=attempt.pk)
    queue_attempt_cost(run_id=run.pk, attempt_id=attempt.pk)
    assert run_billing(run_id=run.pk).upstream_costs == {}

    assert book_pending_attempt_costs() == 1
    queue_attempt_cost(run_id=run.pk, attempt_id=attempt.pk)  # booked already: replayed
    assert book_pending_attempt_costs() == 1

    assert JournalEntry.objects.filter(kind=EntryKind.UPSTREAM_COST).count() == 1
    assert run_billing(run_id=run.pk).upstream_costs == {"USD": 120}
    assert not PendingAttemptCost.objects.exists()


def test_a_ticks_attempt_costs_are_booked_in_one_transaction_and_chain_in_order() -> None:
    """`book_pending_attempt_costs` posts the queued costs together (one chain lock): each
    attempt still has its own entry, linked into the chain in id order, the ledger verifies,
    and one booked before (by the run's end) is replayed, not doubled."""
    from billing.costs import book_attempt_costs
    from billing.ledger_chain import verify_chain

    run, done = _queued_run(questions=3)
    attempts = [
        Attempt.objects.create(
            sample=sample,
            attempt_no=1,
            idempotency_key=f"k{sample.pk}",
            fencing_token=1,
            cost=100 + i,
            cost_currency="USD",
            upstream_id=f"resp-{i}",
            model="m",
            input_tokens=10,
            output_tokens=20,
        )
        for i, sample in enumerate(done)
    ]
    assert book_attempt_costs([attempts[0].pk]) == 1  # booked before, alone
    for attempt in attempts:
        queue_attempt_cost(run_id=run.pk, attempt_id=attempt.pk)

    assert book_pending_attempt_costs() == 3  # two booked now, one replayed

    entries = JournalEntry.objects.filter(kind=EntryKind.UPSTREAM_COST).order_by("id")
    assert [e.idempotency_key for e in entries] == [
        f"upstream-cost:attempt:{a.pk}" for a in attempts
    ]
    assert [e.sample_id for e in entries] == [s.pk for s in done]
    assert all(e.memo == "attempt 1 (m): 10 in + 20 out tokens" for e in entries)
    assert run_billing(run_id=run.pk).upstream_costs == {"USD": 303}
    assert verify_chain() == []
    assert verify_ledger().violations == []
    assert not PendingAttemptCost.objects.exists()
