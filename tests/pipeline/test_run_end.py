"""A run's end is one explicit chain (pipeline/runs.py): check, do (settle), then notify the
followers in one transaction, whose outbox rows are relayed after the commit. No signals."""

from __future__ import annotations

import ast

import pytest

from api import webhooks
from api.models import WebhookDelivery, WebhookEndpoint
from billing.models import SampleSettlement
from pipeline import runs
from pipeline.runs import RunEnded, finish_run_if_done, on_run_finished, run_end_followers
from sampling.models import OutboxMessage
from tests.factories import ended_run
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
