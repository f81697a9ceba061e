"""A cancel reaches the provider (issue 27, point 3): a real Celery worker, the dispatcher's
loop in the test process and the collection provider's simulator over HTTP. The run's cancel
is relayed through the outbox to the platform's queue, the worker asks the provider to stop
exactly the tasks it accepted and has not finished (the simulator records every request),
each once even when the event is delivered again, and the money follows the samples: the
task finished before the cancel is charged, the stopped ones are released."""

from __future__ import annotations

from typing import Any

import pytest

from billing.selectors import run_billing
from pipeline.runs import CANCEL_UPSTREAM, cancel_run
from sampling.models import OutboxMessage, Sample, UpstreamCancel
from sampling.selectors import UpstreamCancels, upstream_cancels
from tests.conftest import launch_funded, make_campaign_data
from tests.dispatching import tick_until
from tests.durability.conftest import assert_invariants
from tests.e2e.conftest import drive_until_settled

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

COLLECTOR = [{"platform": "collector", "device": "desktop", "region": "us", "mode": "web_search"}]


def _completed(event: OutboxMessage) -> bool:
    event.refresh_from_db()
    return event.completed_at is not None


def test_a_cancelled_run_asks_the_provider_to_stop_its_accepted_unfinished_tasks_once(
    simulator: Any, celery_worker: Any
) -> None:
    # Tasks run until the test finishes one: the others are still running at the cancel.
    simulator.configure(profile={"collector": {"polls_until_done": 10_000}})
    data = make_campaign_data(questions=3, targets=COLLECTOR, repeats=1)
    data["screenshot_policy"] = "none"
    run = launch_funded(data)
    celery_worker()
    samples = Sample.objects.filter(run=run)
    tick_until(lambda: samples.filter(submission_state="accepted").count() == 3)
    finished, *running = samples.order_by("pk")
    protocol = simulator.sim.protocol("collector")
    protocol.tasks[finished.upstream_id].finished = True
    tick_until(lambda: samples.filter(pk=finished.pk, collection_state="completed").exists())

    assert cancel_run(run_id=run.pk) == 0  # nothing left unsubmitted: all of it is upstream
    [event] = OutboxMessage.objects.filter(task=CANCEL_UPSTREAM)
    assert event.queue == "platform.collector"
    tick_until(lambda: _completed(event))

    asked = {sample.upstream_id: 1 for sample in running}
    assert protocol.cancels_asked() == asked
    assert upstream_cancels(run_id=run.pk) == UpstreamCancels(asked=2, answered=2, acknowledged=2)

    # The broker forgot the event: the relay publishes it again, nothing is asked twice.
    OutboxMessage.objects.filter(pk=event.pk).update(sent_at=None, completed_at=None)
    tick_until(lambda: _completed(event))
    assert cancel_run(run_id=run.pk) == 0  # a second cancel writes no second event
    assert OutboxMessage.objects.filter(task=CANCEL_UPSTREAM).count() == 1
    assert protocol.cancels_asked() == asked
    assert UpstreamCancel.objects.filter(run=run).count() == 2

    status = drive_until_settled(run.pk)
    assert (status.succeeded, status.failed) == (1, 2), status.as_dict()
    for sample in running:
        sample.refresh_from_db()
        assert sample.failure_reason.endswith("the task was cancelled upstream")
    money = run_billing(run_id=run.pk)
    # The provider finished one task before the cancel: charged. The two it stopped: released.
    assert (money.samples_charged, money.held) == (1, 0)
    assert_invariants(run)
