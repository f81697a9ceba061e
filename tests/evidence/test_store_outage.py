"""An answer in hand is never lost (issue 30): a direct API's answer is kept in the answer inbox
before the evidence store is asked, so an evidence-store outage delays evidence and never turns
an answered sample into a resubmit or an `uncertain` one. The real evidence path: moto's S3
server over HTTP (conftest.py), the simulator over HTTP, the steps as a worker runs them."""

from __future__ import annotations

import socket
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from botocore.config import Config
from django.db.models.functions import Now
from django.utils import timezone

from billing.costs import book_pending_attempt_costs
from billing.models import EntryKind, JournalEntry
from evidence.models import Capture, EvidenceObject
from geo_collect import failpoints
from pipeline.execution import run_step
from pipeline.invariants import check_all
from pipeline.runs import finish_run_if_done
from sampling.dbtime import db_now
from sampling.leases import claim_ready, requeue_expired_leases
from sampling.models import AnswerInbox, Attempt, AttemptStatus, QueueState, Run, Sample, Step
from simulator import SimulatorHandle
from tests.conftest import launch_funded, make_campaign_data
from tests.evidence.conftest import s3_options
from tests.evidence.helpers import OPENAI
from tests.inprocess import drive_in_process

pytestmark = pytest.mark.django_db


def _refused_endpoint() -> str:
    """A loopback port nobody listens on: every connection is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _store_at(settings: Any, endpoint: str, bucket: str) -> None:
    options = s3_options(endpoint, bucket)
    # One try per object (botocore retries a refused connection itself otherwise).
    options["client_config"] = Config(
        retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=1
    )
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {"BACKEND": "evidence.storage.EvidenceS3Storage", "OPTIONS": options},
    }


def _run(questions: int) -> Run:
    data = make_campaign_data(questions=questions, targets=OPENAI, repeats=1)
    data["screenshot_policy"] = "none"
    return launch_funded(data)


def _tick(run: Run) -> list[str]:
    """One round of the in-process dispatcher: every step due now, claimed and run."""
    requeue_expired_leases()
    Sample.objects.filter(run=run, queue_state=QueueState.READY).update(due_at=Now())
    claims = claim_ready(platform="openai", limit=50, owner="test", lease_seconds=60)
    return [run_step(sample_id=c.sample_id, token=c.token, worker="test") for c in claims]


def test_an_evidence_store_outage_parks_no_sample_and_loses_no_answer(
    settings: Any, moto_endpoint: str, bucket: str, simulator: SimulatorHandle
) -> None:
    run = _run(questions=4)
    _store_at(settings, _refused_endpoint(), bucket)

    # The store refuses for longer than the poison cap of claims: the samples wait at their
    # archive step, each answer kept, none asked again.
    outcomes: list[str] = []
    for _ in range(settings.GEO_MAX_STEP_CLAIMS + 3):
        outcomes += _tick(run)
    samples = Sample.objects.filter(run=run)
    assert Counter(outcomes)["retry-later:archive"] >= 4 * (settings.GEO_MAX_STEP_CLAIMS + 2)
    assert set(samples.values_list("step", "queue_state", "submission_state")) == {
        (Step.ARCHIVE, QueueState.READY, "accepted")
    }
    assert AnswerInbox.objects.filter(sample__run=run).count() == 4
    assert len(simulator.answers("openai")) == 4  # asked once each
    # Every answer received has its attempt's outcome and cost, whatever the store does.
    attempts = Attempt.objects.filter(sample__run=run)
    assert {(a.status, a.cost is not None and a.cost > 0) for a in attempts} == {
        (AttemptStatus.ACCEPTED, True)
    }

    _store_at(settings, moto_endpoint, bucket)  # the store is back
    drive_in_process(run.pk)
    book_pending_attempt_costs()

    assert set(samples.values_list("queue_state", "collection_state", "evidence_state")) == {
        (QueueState.DONE, "completed", "stored")
    }
    assert samples.filter(validity="valid").count() == 4
    assert not samples.filter(queue_state=QueueState.PARKED).exists()
    assert not AnswerInbox.objects.filter(sample__run=run).exists()  # consumed
    assert len(simulator.answers("openai")) == 4  # no answer asked for twice
    assert attempts.count() == 4
    # Each answer's raw is in the store, byte for byte as kept.
    assert EvidenceObject.objects.filter(capture__run=run, kind="raw").count() == 4
    booked = JournalEntry.objects.filter(run=run, kind=EntryKind.UPSTREAM_COST)
    assert sorted(booked.values_list("idempotency_key", flat=True)) == sorted(
        f"upstream-cost:attempt:{a.pk}" for a in attempts
    )
    # The run-end check runs after a commit, which this test's transaction never makes.
    assert finish_run_if_done(run_id=run.pk)
    assert check_all(run.pk) == []


def test_a_database_failure_while_keeping_an_answer_is_retried_with_the_answer_in_hand(
    monkeypatch: pytest.MonkeyPatch, local_storage: Any, simulator: SimulatorHandle
) -> None:
    monkeypatch.setenv("GEO_FAILPOINTS", "inbox_write_fails")
    monkeypatch.setattr(failpoints, "_hits", {})
    run = _run(questions=1)

    outcomes = _tick(run)

    assert outcomes == ["answered"]
    assert failpoints._hits == {"inbox_write_fails": 2}  # refused once, kept on the retry
    sample = Sample.objects.get(run=run)
    assert (sample.queue_state, sample.validity) == (QueueState.DONE, "valid")
    assert len(simulator.answers("openai")) == 1
    assert list(sample.attempt_set.values_list("status", flat=True)) == ["accepted"]


def test_a_sample_archived_after_a_store_outage_records_database_times(
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    moto_endpoint: str,
    bucket: str,
    simulator: SimulatorHandle,
) -> None:
    run = _run(questions=1)
    # A worker whose clock is two hours ahead: nothing it records may carry that clock.
    skewed = timezone.now() + timedelta(hours=2)
    monkeypatch.setattr(timezone, "now", lambda: skewed)
    monkeypatch.setattr("connectors.base.datetime", _Skewed)
    _store_at(settings, _refused_endpoint(), bucket)
    before = db_now()
    assert _tick(run) == ["retry-later:archive"]
    kept = AnswerInbox.objects.get(sample__run=run)
    _store_at(settings, moto_endpoint, bucket)
    assert _tick(run) == ["answered"]
    after = db_now()

    sample = Sample.objects.get(run=run)
    capture = Capture.objects.get(sample=sample)
    attempt = sample.attempt_set.get()
    assert capture.captured_at == kept.received_at  # when the answer was received
    for recorded in (
        capture.captured_at,
        attempt.finished_at,
        sample.accepted_at,
        sample.completed_at,
    ):
        assert recorded is not None and before <= recorded <= after, recorded


class _Skewed:
    """`datetime` as connectors.base sees it on the skewed worker: now() two hours ahead."""

    @staticmethod
    def now(tz: Any = None) -> Any:
        from datetime import datetime

        return datetime.now(tz) + timedelta(hours=2)
