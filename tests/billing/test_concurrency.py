"""Concurrent duplicates: real parallel transactions on separate connections."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from django.db import connections

from billing import services
from billing.models import EntryKind, JournalEntry
from billing.selectors import available_balance, run_billing
from sampling.services import save_campaign
from tests.billing.conftest import COLLECTOR, charge, complete, launch, samples, tenant
from tests.conftest import make_campaign_data, spec_with_tenant

pytestmark = pytest.mark.postgresql("concurrent writers")


def _parallel(fn: Callable[[], object], n: int = 4) -> list[BaseException]:
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def work() -> None:
        try:
            barrier.wait()
            fn()
        except BaseException as error:
            errors.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=work) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


@pytest.mark.django_db(transaction=True)
def test_the_same_charge_queued_and_posted_in_parallel_books_once(prices: None) -> None:
    services.top_up(tenant=tenant(), amount=1000, currency="USD", idempotency_key="p")
    run = launch(questions=1, targets=[COLLECTOR])
    (sample,) = samples(run)
    complete(sample)
    assert _parallel(lambda: charge(sample)) == []
    assert JournalEntry.objects.filter(kind=EntryKind.CAPTURE).count() == 1
    assert run_billing(run_id=run.pk).captured == 90


@pytest.mark.django_db(transaction=True)
def test_parallel_top_ups_with_one_key_book_once(prices: None) -> None:
    acme = tenant()
    errors = _parallel(
        lambda: services.top_up(tenant=acme, amount=500, currency="USD", idempotency_key="k")
    )
    assert errors == []
    assert available_balance(acme, "USD") == 500


@pytest.mark.django_db(transaction=True)
def test_parallel_launches_never_overdraw(prices: None) -> None:
    acme = tenant()
    services.top_up(tenant=acme, amount=200, currency="USD", idempotency_key="p")
    for i in range(4):  # campaigns first; the launches race
        data = make_campaign_data(questions=1, targets=[COLLECTOR], repeats=1, name=f"c{i}")
        save_campaign(spec=spec_with_tenant(data))
    names = iter(f"c{i}" for i in range(4))
    lock = threading.Lock()

    def go() -> None:
        with lock:
            name = next(names)
        launch(questions=1, targets=[COLLECTOR], name=name)

    errors = _parallel(go)
    assert all(isinstance(e, services.InsufficientFunds) for e in errors), errors
    assert len(errors) == 2  # 200 buys two holds of 90
    assert available_balance(acme, "USD") == 20
    assert available_balance(acme, "USD", derived=True) == 20
