"""Random sequences of launches, completions, failures, cancellations, settles, duplicates and
refunds, against real runs in PostgreSQL with every transaction committed (so the deferred
zero-sum trigger fires on each one). After each sequence the ledger's invariants hold."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import connection
from django.db.models import Count, Q, Sum
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from billing import services
from billing.checks import verify_ledger
from billing.models import AccountKind, EntryKind, JournalEntry, Posting, SampleSettlement
from billing.selectors import available_balance, run_billing, tenant_balances
from sampling.models import Run, Sample
from tests.billing.conftest import (
    COLLECTOR,
    COLLECTOR_DEEP,
    OPENAI,
    charge,
    complete,
    fail,
    launch,
    tenant,
)

INDEX = st.integers(min_value=0, max_value=1000)

LAUNCH = st.tuples(
    st.just("launch"),
    st.integers(1, 3),
    st.integers(1, 2),
    st.sampled_from([[COLLECTOR], [COLLECTOR_DEEP], [COLLECTOR, OPENAI]]),
    st.sampled_from(["none", "optional"]),
)
COMPLETE = st.tuples(
    st.just("complete"), INDEX, INDEX, st.sampled_from([True, True, True, False]), st.booleans()
)
FAIL = st.tuples(st.just("fail"), INDEX, INDEX, st.booleans())
REFUND = st.tuples(st.just("refund"), INDEX, st.integers(1, 120), st.integers(0, 2))
DUPLICATE = st.tuples(st.just("duplicate"))
# Weighted by repetition: completions, failures, refunds and duplicates are the common events.
OPERATIONS = st.one_of(
    LAUNCH,
    COMPLETE,
    COMPLETE,
    COMPLETE,
    COMPLETE,
    COMPLETE,
    FAIL,
    FAIL,
    st.tuples(st.just("accept"), INDEX, INDEX),
    st.tuples(st.just("cancel"), INDEX),
    st.tuples(st.just("settle"), INDEX),
    REFUND,
    REFUND,
    st.tuples(st.just("top_up"), st.integers(1, 600), st.integers(0, 3)),
    DUPLICATE,
    DUPLICATE,
)


class Driver:
    def __init__(self) -> None:
        self.slug = f"prop-{uuid.uuid4().hex[:10]}"
        self.tenant = tenant(self.slug)
        self.runs: list[Run] = []
        self.top_ups: dict[int, int] = {}
        self.last: Any = None
        self.launches = 0

    def _sample(self, run_index: int, sample_index: int) -> Sample | None:
        if not self.runs:
            return None
        run = self.runs[run_index % len(self.runs)]
        ids = list(Sample.objects.filter(run=run).order_by("pk").values_list("pk", flat=True))
        return Sample.objects.get(pk=ids[sample_index % len(ids)])

    def _run(self, index: int) -> Run | None:
        return self.runs[index % len(self.runs)] if self.runs else None

    def apply(self, op: tuple[Any, ...]) -> None:
        getattr(self, f"op_{op[0]}")(*op[1:])

    def op_launch(self, questions: int, repeats: int, targets: Any, policy: str) -> None:
        self.launches += 1
        before = Run.objects.filter(tenant__slug=self.slug).count()
        try:
            run = launch(
                tenant_slug=self.slug,
                name=f"c{self.launches}",
                questions=questions,
                targets=targets,
                repeats=repeats,
                screenshot_policy=policy,
            )
        except services.InsufficientFunds as short:
            assert short.available < short.required
            assert short.available == available_balance(self.tenant, "USD")
            assert Run.objects.filter(tenant__slug=self.slug).count() == before
            return
        self.runs.append(run)

    def op_complete(self, r: int, s: int, valid: bool, screenshot: bool) -> None:
        sample = self._sample(r, s)
        if sample is None or sample.collection_state in ("completed", "failed"):
            return
        complete(sample, valid=valid, screenshot=screenshot)
        if valid:
            self.last = ("capture", sample.pk)
            charge(sample)

    def op_fail(self, r: int, s: int, accepted: bool) -> None:
        sample = self._sample(r, s)
        if sample is None or sample.collection_state in ("completed", "failed"):
            return
        fail(sample, accepted=accepted or sample.submission_state != "planned")

    def op_accept(self, r: int, s: int) -> None:
        sample = self._sample(r, s)
        if sample is not None and sample.submission_state == "planned":
            Sample.objects.filter(pk=sample.pk).update(submission_state="accepted")

    def op_cancel(self, r: int) -> None:
        run = self._run(r)
        if run is not None:
            self.last = ("cancel", run.pk)
            services.release_unaccepted_hold(run_id=run.pk)

    def op_settle(self, r: int) -> None:
        run = self._run(r)
        if run is not None:
            self.last = ("settle", run.pk)
            services.settle_run(run_id=run.pk)

    def op_refund(self, r: int, amount: int, key: int) -> None:
        run = self._run(r)
        if run is None:
            return
        self.last = ("refund", run, amount, key)
        self._refund(run, amount, key)

    def _refund(self, run: Run, amount: int, key: int) -> None:
        try:
            services.refund(
                tenant=self.tenant,
                amount=amount,
                currency="USD",
                idempotency_key=f"{run.pk}:{key}",
                run=run,
            )
        except services.IdempotencyConflict:
            pass
        except services.BillingError as refused:
            assert "exceeds" in str(refused)

    def op_top_up(self, amount: int, key: int) -> None:
        self.last = ("top_up", amount, key)
        try:
            services.top_up(
                tenant=self.tenant, amount=amount, currency="USD", idempotency_key=f"pay-{key}"
            )
        except services.IdempotencyConflict:
            assert key in self.top_ups and self.top_ups[key] != amount
            return
        assert self.top_ups.setdefault(key, amount) == amount

    def op_duplicate(self) -> None:
        """Deliver the last task, message or callback again."""
        if self.last is None:
            return
        kind, *args = self.last
        if kind == "capture":
            charge(Sample.objects.get(pk=args[0]))
        elif kind == "cancel":
            services.release_unaccepted_hold(run_id=args[0])
        elif kind == "settle":
            services.settle_run(run_id=args[0])
        elif kind == "refund":
            self._refund(*args)
        elif kind == "top_up":
            self.op_top_up(*args)


def assert_invariants(driver: Driver) -> None:
    # Every entry balanced per currency (derived here with SQL, independent of the checker).
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p.entry_id FROM billing_posting p JOIN billing_account a"
            " ON a.id = p.account_id GROUP BY p.entry_id, a.currency HAVING sum(p.amount) <> 0"
        )
        assert cursor.fetchall() == []
    # Each sample charged at most once.
    assert not (
        JournalEntry.objects.filter(kind=EntryKind.CAPTURE)
        .values("sample_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .exists()
    )
    assert not (
        SampleSettlement.objects.values("sample_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .exists()
    )
    # Available balance never negative, cached equals derived.
    available = available_balance(driver.tenant, "USD")
    assert available >= 0
    assert available == available_balance(driver.tenant, "USD", derived=True)
    # reserved = captured + released + still held, per run.
    for run in driver.runs:
        billing = run_billing(run_id=run.pk)
        assert billing.balanced, billing.as_dict()
        assert billing.reserved == billing.estimated_max
        assert billing.held >= 0
        assert billing.refunded <= billing.captured
    # Conservation: all the tenant ever paid in is available, held, or charged (net).
    paid = sum(driver.top_ups.values())
    for balance in tenant_balances(driver.tenant):
        assert balance.available + balance.held + balance.charged == paid
    # Holds never go below zero anywhere.
    assert (
        not Posting.objects.filter(account__kind=AccountKind.HOLD)
        .values("account_id")
        .annotate(t=Sum("amount"))
        .filter(Q(t__lt=0))
        .exists()
    )


@pytest.mark.postgresql("real commits (SQLite's append-only triggers refuse the test flush)")
@pytest.mark.django_db(transaction=True)
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    first=LAUNCH,
    ops=st.lists(OPERATIONS, min_size=1, max_size=20),
    opening=st.sampled_from([3000, 1500, 400, 50, 0]),
)
def test_random_sequences_keep_every_ledger_invariant(
    prices: None, first: tuple[Any, ...], ops: list[tuple[Any, ...]], opening: int
) -> None:
    driver = Driver()
    if opening:
        driver.op_top_up(opening, 99)
    for op in [first, *ops]:
        driver.apply(op)
        assert available_balance(driver.tenant, "USD") >= 0
    # Finish every run: what is still open completes (even ids, valid: settle charges these
    # missed captures) or fails (odd ids); then the run-finished message arrives twice.
    for run in driver.runs:
        open_samples = Sample.objects.filter(run=run).exclude(
            collection_state__in=["completed", "failed"]
        )
        for sample in open_samples:
            if sample.pk % 2 == 0:
                complete(sample)
            else:
                fail(sample, accepted=sample.submission_state != "planned")
        Sample.objects.filter(run=run, collection_state="completed", validity="").update(
            validity="invalid"
        )
        services.settle_run(run_id=run.pk)
        services.settle_run(run_id=run.pk)
        billing = run_billing(run_id=run.pk)
        assert billing.held == 0
        refundable = billing.captured - billing.refunded
        if refundable > 1:
            for _ in range(2):  # a refund request retried: one refund
                driver._refund(run, refundable // 2, 7)
    assert_invariants(driver)
    report = verify_ledger()
    assert report.ok, report.violations
