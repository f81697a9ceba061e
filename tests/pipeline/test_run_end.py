"""A run's end is one explicit chain (pipeline/runs.py): check, do (settle), then notify the
followers in one transaction, whose outbox rows are relayed after the commit. No signals."""

from __future__ import annotations

import ast
import base64
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.db.models.functions import Now

from api import webhooks
from api.models import WebhookDelivery, WebhookEndpoint
from billing.models import SampleSettlement
from pipeline import runs
from pipeline.dispatch import relay_outbox
from pipeline.runs import RunEnded, finish_run_if_done, on_run_finished, run_end_followers
from pipeline.tasks import run_finished as run_finished_task
from sampling.models import OutboxMessage
from tests.factories import ended_run
from tests.services import broker_url, empty_broker
from tests.sources import python_sources

SIGNAL_CLASS = "Signal"


def signals_defined(tree: ast.AST) -> list[int]:
    """Lines that make a Django (or any) `Signal` instance or import the class."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name == SIGNAL_CLASS:
                found.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and any(a.name == SIGNAL_CLASS for a in node.names):
            found.append(node.lineno)
    return found


def test_the_project_defines_no_signal() -> None:
    defined = [
        f"{path}:{line}" for path, tree in python_sources() for line in signals_defined(tree)
    ]
    assert defined == [], "cross-domain effects are explicit calls (pipeline/runs.py's chain)"


def test_the_scan_finds_a_signal() -> None:
    source = f"from django.dispatch import {SIGNAL_CLASS}\nended = {SIGNAL_CLASS}()\n"
    assert signals_defined(ast.parse(source)) == [1, 2]


def test_the_api_follows_every_runs_end_with_its_webhooks() -> None:
    assert run_end_followers()["api.webhooks"] is webhooks.record_run_end


@pytest.mark.django_db
def test_followers_are_told_once_the_run_is_settled(monkeypatch: pytest.MonkeyPatch) -> None:
    run = ended_run(tenant="ends")
    told: list[tuple[RunEnded, int]] = []

    def follower(ended: RunEnded) -> None:
        told.append((ended, SampleSettlement.objects.filter(run_id=ended.run_id).count()))

    monkeypatch.setitem(runs._followers, "test.settled", follower)
    assert finish_run_if_done(run_id=run.pk)
    (message,) = OutboxMessage.objects.filter(task="pipeline.run_finished")
    on_run_finished(**message.payload)  # what the relayed message's task does
    ((ended, settled),) = told
    assert ended.run_id == run.pk and ended.round == 0
    assert ended.status.finished and ended.status.succeeded == 1
    assert settled == 1  # billing was final when the follower was told


@pytest.mark.django_db
def test_a_failing_follower_leaves_no_notification_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = ended_run(tenant="ends", review=True)
    WebhookEndpoint.objects.create(tenant=run.tenant, url="https://hooks.example/x", secret="s")

    def broken(ended: RunEnded) -> None:
        raise RuntimeError("follower bug")

    monkeypatch.setitem(runs._followers, "test.broken", broken)
    with pytest.raises(RuntimeError, match="follower bug"):
        on_run_finished(run_id=run.pk)
    assert not WebhookDelivery.objects.exists()
    assert not OutboxMessage.objects.filter(task=webhooks.TASK).exists()
    monkeypatch.delitem(runs._followers, "test.broken")
    on_run_finished(run_id=run.pk)  # the task's next delivery tells every follower again
    assert sorted(WebhookDelivery.objects.values_list("event", flat=True)) == [
        "run.finished",
        "run.needs_review",
    ]


# --- an event is done when its consumer completed it ------------------------------------------


@pytest.fixture
def broker() -> Iterator[redis.Redis]:
    with empty_broker(broker_url("the relay tests")) as client:
        yield client


def _published(broker: redis.Redis) -> list[dict[str, Any]]:
    """The kwargs of every message waiting in the default queue (kombu's JSON envelope around
    Celery's [args, kwargs, embed] body)."""
    found = []
    for raw in broker.lrange("default", 0, -1):
        body = json.loads(base64.b64decode(json.loads(raw)["body"]))
        found.append(body[1])
    return found


@pytest.mark.django_db
def test_the_relay_publishes_again_an_event_its_consumer_did_not_complete(
    broker: redis.Redis,
) -> None:
    run = ended_run(tenant="ends")
    assert finish_run_if_done(run_id=run.pk)
    event = OutboxMessage.objects.get(task="pipeline.run_finished")
    assert relay_outbox() == 1
    event.refresh_from_db()
    assert event.sent_at is not None and event.completed_at is None  # published is not done
    assert _published(broker) == [{"run_id": str(run.pk), "outbox_id": event.pk}]
    assert relay_outbox() == 0  # its consumer has GEO_OUTBOX_REDELIVER_SECONDS to complete it

    broker.flushdb()  # Redis restarted empty: the message is gone
    OutboxMessage.objects.filter(pk=event.pk).update(sent_at=Now() - timedelta(hours=1))
    assert relay_outbox() == 1
    assert _published(broker) == [{"run_id": str(run.pk), "outbox_id": event.pk}]

    run_finished_task(**_published(broker)[0])  # what the worker does with it
    event.refresh_from_db()
    assert event.completed_at is not None
    assert SampleSettlement.objects.filter(run_id=run.pk).count() == 1
    broker.flushdb()
    OutboxMessage.objects.filter(pk=event.pk).update(sent_at=Now() - timedelta(hours=1))
    relay_outbox()  # what the followers wrote (the run's series, monitoring) goes out once
    # completed: never published again
    assert all(kwargs["outbox_id"] != event.pk for kwargs in _published(broker))


@pytest.mark.django_db
def test_the_event_stays_open_when_the_run_end_chain_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    run = ended_run(tenant="ends")
    assert finish_run_if_done(run_id=run.pk)
    event = OutboxMessage.objects.get(task="pipeline.run_finished")

    def broken(ended: RunEnded) -> None:
        raise RuntimeError("follower bug")

    monkeypatch.setitem(runs._followers, "test.broken", broken)
    with pytest.raises(RuntimeError, match="follower bug"):
        on_run_finished(run_id=run.pk, outbox_id=event.pk)
    event.refresh_from_db()
    assert event.completed_at is None  # settled, but not told: the relay publishes it again


@pytest.mark.django_db
def test_a_webhook_message_is_completed_with_its_attempt_or_when_nothing_is_left() -> None:
    run = ended_run(tenant="ends", finished=True)
    endpoint = WebhookEndpoint.objects.create(
        tenant=run.tenant, url="http://127.0.0.1:9/closed", secret="s"
    )
    on_run_finished(run_id=run.pk)
    (message,) = OutboxMessage.objects.filter(task=webhooks.TASK)
    delivery = WebhookDelivery.objects.get(endpoint=endpoint)
    delay = webhooks.deliver(delivery_id=delivery.pk, outbox_id=message.pk)  # refused: a retry
    assert delay is not None
    message.refresh_from_db()
    assert message.completed_at is not None  # its effect, one attempt recorded, is done
    again = OutboxMessage.objects.create(task=webhooks.TASK, payload={"delivery_id": 0})
    assert webhooks.deliver(delivery_id=0, outbox_id=again.pk) is None  # no such delivery
    again.refresh_from_db()
    assert again.completed_at is not None


def test_a_sweep_with_a_period_runs_at_most_that_often() -> None:
    from pipeline import sweeps

    ran: list[int] = []

    def sweep() -> int:
        ran.append(1)
        return 1

    sweeps.register_sweep(name="test.every", sweep=sweep, every=lambda: 60)
    try:
        assert sweeps.run_sweeps()["test.every"] == 1
        assert "test.every" not in sweeps.run_sweeps()  # not due for another minute
        assert ran == [1]
    finally:
        sweeps._sweeps.pop("test.every")
        sweeps._every.pop("test.every")
        sweeps._last.pop("test.every")


def test_the_held_runs_sweep_looks_a_tenth_as_often_as_events_are_published_again(
    settings: Any,
) -> None:
    from pipeline.sweeps import registered_sweeps

    assert registered_sweeps()["pipeline.held_runs"] is runs.settle_held_runs
    settings.GEO_OUTBOX_REDELIVER_SECONDS = 300
    assert runs.held_runs_every() == 30


def test_every_outbox_task_takes_the_id_its_consumer_completes() -> None:
    """The relay adds `outbox_id` to every outbox message's kwargs: a consumer that does not
    take it fails every delivery (found: analysis.reanalyse_batch)."""
    import inspect

    from analysis import tasks as analysis_tasks
    from analysis.services import REANALYSE_TASK
    from api import tasks as api_tasks
    from billing import imports as statement_imports
    from billing import tasks as billing_tasks
    from pipeline import tasks as pipeline_tasks

    consumers = {
        runs.RUN_FINISHED: pipeline_tasks.run_finished,
        webhooks.TASK: api_tasks.deliver_webhook,
        REANALYSE_TASK: analysis_tasks.reanalyse_batch,
        statement_imports.TASK: billing_tasks.import_statement,
    }
    for name, task in consumers.items():
        assert task.name == name
        assert "outbox_id" in inspect.signature(task.run).parameters, name
