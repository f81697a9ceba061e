"""Admission control in the dispatcher: fair shares, separate caps, rate limits."""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.conf import settings as django_settings
from django.db import OperationalError
from django.db.models.functions import Now

from pipeline.dispatch import Dispatcher, queue_for
from pipeline.dispatch import _load as load_due_and_leased
from pipeline.management.commands.dispatcher import tick_or_wait
from sampling.models import Sample, Step
from tenancy.models import Tenant
from tests.conftest import launch_funded, make_campaign_data
from tests.services import empty_broker

COLLECTOR = [{"platform": "collector", "device": "desktop", "region": "us", "mode": "web_search"}]


@pytest.fixture(autouse=True)
def _empty_broker() -> Iterator[None]:
    with empty_broker(django_settings.CELERY_BROKER_URL):
        yield


OPENAI = [{"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"}]


def _messages(queue: str) -> list[tuple[str, list[Any]]]:
    """The task name and positional arguments of each message waiting on `queue`."""
    broker = redis.Redis.from_url(django_settings.CELERY_BROKER_URL)
    found = []
    for raw in broker.lrange(queue, 0, -1):
        message = json.loads(raw)
        args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
        found.append((message["headers"]["task"], args))
    return found


def _launch(tenant: str, questions: int) -> Any:
    data = make_campaign_data(questions=questions, targets=COLLECTOR, repeats=1, tenant=tenant)
    return launch_funded(data)


def _leased_by_tenant() -> Counter[str]:
    return Counter(
        Sample.objects.filter(queue_state="leased").values_list("tenant__slug", flat=True)
    )


@pytest.mark.django_db
def test_a_tenant_with_ten_times_the_work_gets_no_more_slots(settings: Any) -> None:
    settings.GEO_PLATFORM_CONCURRENCY = 8
    _launch("big", 100)
    _launch("small", 10)

    report = Dispatcher(owner="t").tick()

    assert report.claimed == 8
    assert _leased_by_tenant() == {"big": 4, "small": 4}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("platform_cap", "big_limit", "leased"),
    [
        # At its concurrency cap, a tenant leaves the slots to the others.
        (10, {"max_concurrency": 2}, {"big": 2, "small": 8}),
        # Its rate limit caps its calls, not the others': a burst of 3; small keeps its share.
        (8, {"max_calls_per_second": 3}, {"big": 3, "small": 4}),
    ],
    ids=["concurrency-cap", "rate-limit"],
)
def test_a_tenant_at_its_own_limit_leaves_the_slots_to_others(
    settings: Any, platform_cap: int, big_limit: dict[str, int], leased: dict[str, int]
) -> None:
    settings.GEO_PLATFORM_CONCURRENCY = platform_cap
    _launch("big", 50)
    _launch("small", 50)
    Tenant.objects.filter(slug="big").update(**big_limit)

    Dispatcher(owner="t").tick()

    assert _leased_by_tenant() == leased


@pytest.mark.django_db
def test_evidence_work_does_not_use_the_answer_collection_slots(settings: Any) -> None:
    settings.GEO_PLATFORM_CONCURRENCY = 3
    settings.GEO_EVIDENCE_CONCURRENCY = 2
    run = _launch("acme", 20)
    ids = list(Sample.objects.filter(run=run).order_by("id").values_list("id", flat=True))
    Sample.objects.filter(pk__in=ids[:10]).update(step=Step.EVIDENCE)

    report = Dispatcher(owner="t").tick()

    assert report.published == {"platform.collector": 3, "evidence": 2}
    leased = Counter(Sample.objects.filter(queue_state="leased").values_list("step", flat=True))
    assert leased == {"submit": 3, "evidence": 2}


@pytest.mark.django_db
def test_rate_limit_per_platform_and_operation_bounds_each_tick(settings: Any) -> None:
    settings.GEO_PLATFORM_CONCURRENCY = 50
    settings.GEO_RATE_LIMITS = {"collector": {"submit": 0.001}}  # burst of one, then ~never
    _launch("acme", 20)
    dispatcher = Dispatcher(owner="t")

    assert dispatcher.tick().claimed == 1
    assert dispatcher.tick().claimed == 0


def test_steps_route_to_platform_evidence_and_analysis_queues() -> None:
    assert queue_for(step=Step.SUBMIT, platform="openai") == "platform.openai"
    assert queue_for(step=Step.POLL, platform="collector") == "platform.collector"
    assert queue_for(step=Step.EVIDENCE, platform="collector") == "evidence"
    assert queue_for(step=Step.ANALYSE, platform="openai") == "analysis"


@pytest.mark.django_db
def test_a_run_whose_last_sample_ended_unnoticed_is_finished_by_the_next_tick() -> None:
    from sampling.models import OutboxMessage, Run

    run = _launch("acme", 3)
    # As if the worker that ended the last sample died before checking the run.
    Sample.objects.filter(run=run).update(queue_state="done", collection_state="failed")

    Dispatcher(owner="t").tick()

    assert Run.objects.get(pk=run.pk).finished_at is not None
    assert OutboxMessage.objects.filter(task="pipeline.run_finished").count() == 1


@pytest.mark.django_db
def test_the_global_rate_limit_caps_every_tenant_together(settings: Any) -> None:
    settings.GEO_PLATFORM_CONCURRENCY = 8
    settings.GEO_GLOBAL_RATE_LIMIT = 5
    _launch("big", 50)
    _launch("small", 50)

    report = Dispatcher(owner="t").tick()

    assert report.claimed == 5  # the burst of the global budget, under the platform's 8
    assert set(_leased_by_tenant()) == {"big", "small"}  # shared between the tenants


@pytest.mark.django_db(transaction=True)  # autocommit, as the dispatcher runs
def test_a_tick_that_fails_in_the_database_is_logged_and_the_next_one_runs(
    caplog: Any,
) -> None:
    class DeadlockedOnce(Dispatcher):
        failed = False

        def tick(self) -> Any:
            if not self.failed:
                self.failed = True
                raise OperationalError("deadlock detected")
            return super().tick()

    dispatcher = DeadlockedOnce(owner="test")
    _launch("acme", 2)

    assert tick_or_wait(dispatcher, 0.0) is None
    assert "dispatcher tick failed" in caplog.text
    report = tick_or_wait(dispatcher, 0.0)
    assert report is not None and report.claimed == 2


@pytest.mark.django_db
def test_one_ticks_claims_for_a_queue_travel_in_messages_of_several_steps(settings: Any) -> None:
    settings.GEO_STEPS_PER_MESSAGE = 3
    data = make_campaign_data(questions=4, targets=OPENAI, repeats=1, tenant="steps")
    launch_funded(data)

    report = Dispatcher(owner="t").tick()

    leased = set(Sample.objects.filter(queue_state="leased").values_list("pk", "fencing_token"))
    assert report.published == {"platform.openai": 4} and len(leased) == 4
    [(single, lone), (several, [held])] = sorted(_messages("platform.openai"))
    assert (several, len(held), single) == ("pipeline.execute_steps", 3, "pipeline.execute_step")
    assert {(sample, token) for sample, token in [*held, lone]} == leased


@pytest.mark.django_db
def test_a_lone_claim_travels_as_a_step_message_of_its_own(settings: Any) -> None:
    data = make_campaign_data(questions=1, targets=OPENAI, repeats=1, tenant="lone")
    launch_funded(data)

    Dispatcher(owner="t").tick()

    [(pk, token)] = Sample.objects.filter(queue_state="leased").values_list("pk", "fencing_token")
    assert _messages("platform.openai") == [("pipeline.execute_step", [pk, token])]


@pytest.mark.django_db
def test_leases_run_out_are_looked_for_on_the_first_tick_then_at_the_bookkeeping_pace(
    settings: Any,
) -> None:
    settings.GEO_DISPATCH_BOOKKEEPING_SECONDS = 60
    launch_funded(make_campaign_data(questions=1, targets=OPENAI, repeats=1, tenant="pace"))
    dispatcher = Dispatcher(owner="t")
    assert dispatcher.tick().claimed == 1
    Sample.objects.filter(queue_state="leased").update(lease_until=Now())  # its worker died

    assert dispatcher.tick().requeued == 0  # looked for on the first tick, not again yet

    dispatcher.looked_at -= 60  # a minute later
    assert dispatcher.tick().requeued == 1


@pytest.mark.django_db
def test_due_work_is_found_for_each_platform_step_and_tenant_and_only_where_it_is_due() -> None:
    for tenant in ("due-a", "due-b", "later"):
        launch_funded(make_campaign_data(questions=3, targets=OPENAI, repeats=1, tenant=tenant))
    later = Sample.objects.filter(tenant__slug="later")
    later.update(due_at=Now() + timedelta(hours=1))  # a backlog not due yet
    b_first = Sample.objects.filter(tenant__slug="due-b").order_by("pk").first()
    assert b_first is not None
    Sample.objects.filter(pk=b_first.pk).update(step=Step.ANALYSE)  # another step, due
    Sample.objects.filter(tenant__slug="due-a").update(queue_state="leased")  # none ready

    due = load_due_and_leased().due

    tenant = dict(Tenant.objects.values_list("slug", "pk"))
    assert due == {
        ("openai", Step.SUBMIT): [tenant["due-b"]],
        ("openai", Step.ANALYSE): [tenant["due-b"]],
    }
