"""A cancelled run asks the upstream to stop the tasks it accepted and has not finished
(pipeline/upstream_cancel.py), in the test process against the simulator over HTTP: once per
task whatever is delivered again, each answer recorded, the ledger untouched by it; what the
upstream finished anyway is charged. The same with a real worker: tests/e2e."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db.models.functions import Now

from api.views.runs import run_body
from billing.models import JournalEntry, PendingCapture, Posting, SampleSettlement
from billing.selectors import run_billing
from connectors.adapters.brightdata import split_upstream_id
from connectors.adapters.collector import CollectorConnector
from connectors.base import Capabilities, ConnectorConfig
from connectors.registry import available_platforms
from pipeline import upstream_cancel
from pipeline.execution import run_step
from pipeline.models import Circuit
from pipeline.runs import CANCEL_UPSTREAM, cancel_run, cancels_upstream, on_run_finished
from sampling.leases import claim_ready
from sampling.models import OutboxMessage, QueueState, Run, Sample, Step, UpstreamCancel
from sampling.selectors import UpstreamCancels, run_status, upstream_cancels
from simulator import SimulatorHandle
from tests.conftest import launch_funded, make_campaign_data
from tests.inprocess import drive_in_process
from tests.services import upstream_simulator

pytestmark = pytest.mark.django_db

COLLECTOR = {"platform": "collector", "device": "desktop", "region": "us", "mode": "web_search"}
AFTER_SUBMIT = (Step.POLL, Step.EVIDENCE, Step.ANALYSE)
COPILOT_WEB = {"platform": "copilot_web", "device": "desktop", "region": "us", "mode": "web_search"}
CHATGPT_WEB = {"platform": "chatgpt_web", "device": "desktop", "region": "us", "mode": "web_search"}


@pytest.fixture
def upstream(settings: Any) -> Iterator[SimulatorHandle]:
    with upstream_simulator(settings, seed=7) as handle:
        # Tasks run until a test finishes them: a cancel finds them running.
        handle.configure(profile={"collector": {"polls_until_done": 1000}})
        yield handle


def _launch(questions: int, targets: list[dict[str, str]]) -> Run:
    data = make_campaign_data(questions=questions, targets=targets, repeats=1)
    data["screenshot_policy"] = "none"
    return launch_funded(data)


def _step(platform: str, *, limit: int = 50, steps: tuple[str, ...] = ()) -> int:
    """Claim and run the due steps of `platform` once (only `steps`, if given); how many
    ran."""
    claims = claim_ready(
        platform=platform, limit=limit, owner="test", lease_seconds=60, steps=steps
    )
    for claim in claims:
        run_step(sample_id=claim.sample_id, token=claim.token, worker="test")
    return len(claims)


def _finish_upstream(upstream: SimulatorHandle, sample: Sample) -> None:
    """The provider finishes the sample's task; its steps run until it is collected."""
    upstream.sim.protocol("collector").tasks[sample.upstream_id].finished = True
    for _ in range(20):
        Sample.objects.filter(pk=sample.pk, queue_state=QueueState.READY).update(due_at=Now())
        _step("collector", steps=AFTER_SUBMIT)  # the sample never submitted stays so
        sample.refresh_from_db()
        if sample.queue_state == QueueState.DONE:
            return
    raise AssertionError(f"sample {sample.pk} not collected: {sample.step} {sample.queue_state}")


def _ledger() -> tuple[int, ...]:
    return tuple(
        model.objects.count() for model in (JournalEntry, Posting, SampleSettlement, PendingCapture)
    )


def test_a_cancel_asks_the_provider_once_for_each_accepted_unfinished_task(
    upstream: SimulatorHandle,
) -> None:
    run = _launch(4, [COLLECTOR, CHATGPT_WEB])
    assert _step("collector", limit=3) == 3  # the fourth is never submitted
    assert _step("chatgpt_web") == 4  # accepted by DataForSEO, which has no cancel
    accepted = list(
        Sample.objects.filter(run=run, platform="collector", submission_state="accepted")
    )
    assert len(accepted) == 3 and all(s.upstream_id for s in accepted)
    finished, stopped, anyway = accepted
    _finish_upstream(upstream, finished)
    assert finished.collection_state == "completed"
    protocol = upstream.sim.protocol("collector")
    # Finished upstream, not yet polled here: the cancel reaches it too late.
    protocol.tasks[anyway.upstream_id].finished = True

    assert cancel_run(run_id=run.pk) == 1  # the one never submitted, locally
    [event] = OutboxMessage.objects.filter(task=CANCEL_UPSTREAM)
    assert (event.queue, event.payload) == (
        "platform.collector",
        {"run_id": str(run.pk), "platform": "collector"},
    )
    assert not cancels_upstream("chatgpt_web") and cancels_upstream("collector")
    ledger = _ledger()

    asked = upstream_cancel.cancel_accepted_tasks(
        run_id=str(run.pk), platform="collector", outbox_id=event.pk
    )

    assert asked == 2
    once_each = {stopped.upstream_id: 1, anyway.upstream_id: 1}
    assert protocol.cancels_asked() == once_each
    rows = UpstreamCancel.objects.filter(run=run)
    assert {(r.upstream_id, r.acknowledged, r.error) for r in rows} == {
        (stopped.upstream_id, True, ""),
        (anyway.upstream_id, False, ""),  # declined: it had finished
    }
    assert all(r.requested_at and r.answered_at for r in rows)
    assert upstream_cancels(run_id=run.pk) == UpstreamCancels(asked=2, answered=2, acknowledged=1)
    answers = {"asked": 2, "answered": 2, "acknowledged": 1, "failed": 0}
    assert run_body(run)["upstream_cancel"] == answers  # the API's run status
    printed = StringIO()
    call_command("run_status", str(run.pk), stdout=printed)
    assert "upstream cancel asked for 2 tasks: acknowledged 1, failed 0" in printed.getvalue()
    event.refresh_from_db()
    assert event.completed_at is not None
    assert _ledger() == ledger  # the upstream cancel moves no money

    # Delivered again, cancelled again: nothing is asked twice.
    assert upstream_cancel.cancel_accepted_tasks(run_id=str(run.pk), platform="collector") == 0
    assert cancel_run(run_id=run.pk) == 0
    assert OutboxMessage.objects.filter(task=CANCEL_UPSTREAM).count() == 1
    assert protocol.cancels_asked() == once_each

    # The stopped task fails through its own poll; the one finished anyway is collected.
    drive_in_process(run.pk)
    stopped.refresh_from_db()
    assert stopped.collection_state == "failed"
    assert stopped.failure_reason.endswith("the task was cancelled upstream")
    anyway.refresh_from_db()
    assert anyway.collection_state == "completed"
    status = run_status(run_id=run.pk)
    assert status.finished and status.succeeded == 2 + 4, status.as_dict()
    on_run_finished(run_id=run.pk)  # the run-finished event's task: settles the run
    money = run_billing(run_id=run.pk)
    # Charged: both collector tasks that finished (before the cancel, and anyway) and the
    # DataForSEO ones (no cancel there); the stopped task and the one never submitted are
    # released.
    assert (money.samples_charged, money.held) == (2 + 4, 0)


def test_a_cancelled_run_on_a_bright_data_surface_asks_it_to_stop_the_runs_snapshot(
    upstream: SimulatorHandle,
) -> None:
    upstream.configure(profile={"brightdata": {"running_looks": 1000}})  # still scraping
    run = _launch(3, [COPILOT_WEB])
    assert _step("copilot_web") == 3
    accepted = Sample.objects.filter(run=run, submission_state="accepted")
    snapshots = [split_upstream_id(s.upstream_id)[0] for s in accepted.order_by("pk")]
    assert len(snapshots) == 3
    cancel_run(run_id=run.pk)
    [event] = OutboxMessage.objects.filter(task=CANCEL_UPSTREAM)
    assert event.payload == {"run_id": str(run.pk), "platform": "copilot_web"}
    ledger = _ledger()

    assert upstream_cancel.cancel_accepted_tasks(run_id=str(run.pk), platform="copilot_web") == 3

    # The vendor cancels whole snapshots: a sample's request stops its snapshot, or finds it
    # stopped by the run's earlier sample of the same snapshot (not running, never to
    # deliver); either way the sample's answer says stopped.
    protocol = upstream.sim.protocol("brightdata")
    asked = protocol.cancels  # type: ignore[attr-defined]
    assert sorted(c["snapshot_id"] for c in asked) == sorted(snapshots)
    assert {c["outcome"] for c in asked} <= {"cancelled", "not_running"}
    assert sum(c["outcome"] == "cancelled" for c in asked) == len(set(snapshots))
    rows = UpstreamCancel.objects.filter(run=run)
    assert {(r.acknowledged, r.error) for r in rows} == {(True, "")}
    assert upstream_cancels(run_id=run.pk) == UpstreamCancels(asked=3, answered=3, acknowledged=3)
    assert _ledger() == ledger  # the upstream cancel moves no money


def test_a_cancel_the_provider_cannot_receive_is_recorded_and_counted_by_its_circuit(
    upstream: SimulatorHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _launch(1, [COLLECTOR])
    assert _step("collector") == 1
    cancel_run(run_id=run.pk)
    unreachable = CollectorConnector(
        ConnectorConfig(
            platform="collector", base_url="http://127.0.0.1:9", api_key="col-secret-789"
        )
    )
    monkeypatch.setattr(upstream_cancel, "get_connector", lambda platform: unreachable)

    assert upstream_cancel.cancel_accepted_tasks(run_id=str(run.pk), platform="collector") == 1

    [row] = UpstreamCancel.objects.filter(run=run)
    assert row.acknowledged is False and row.answered_at is not None
    assert row.error.startswith("unreachable:") and "col-secret-789" not in row.error
    assert Circuit.objects.get(platform="collector").failures == 1
    assert upstream_cancels(run_id=run.pk) == UpstreamCancels(asked=1, answered=1, failed=1)
    # Not asked again: a cancel is sent at most once (docs/decisions.md).
    assert upstream_cancel.cancel_accepted_tasks(run_id=str(run.pk), platform="collector") == 0


class _Undeclared(CollectorConnector):
    """A new vendor's connector: it implements `cancel` and declares nothing about it."""

    def capabilities(self) -> Capabilities:
        return dataclasses.replace(super().capabilities(), cancellable=None)


def test_a_connector_that_implements_cancel_is_asked_unless_it_declares_it_cannot(
    settings: Any,
) -> None:
    settings.GEO_UPSTREAM_BASE_URL = "http://127.0.0.1:9"
    config = ConnectorConfig(platform="collector", base_url="http://127.0.0.1:9")
    assert _Undeclared(config).can_cancel()
    # Of the platforms configured here, the collector and the surfaces Bright Data serves by
    # default stop accepted tasks: DataForSEO and SerpApi document no cancel, a direct API
    # answers in the call.
    assert [p for p in available_platforms() if cancels_upstream(p)] == [
        "collector",
        "copilot_web",
        "perplexity_web",
    ]


def test_a_platform_that_can_no_longer_cancel_completes_the_event_asking_nothing(
    upstream: SimulatorHandle, settings: Any
) -> None:
    run = _launch(1, [COLLECTOR])
    assert _step("collector") == 1
    cancel_run(run_id=run.pk)
    [event] = OutboxMessage.objects.filter(task=CANCEL_UPSTREAM)
    settings.GEO_PLATFORMS = {"collector": {"EXTRA": "not json"}}  # misconfigured since

    assert (
        upstream_cancel.cancel_accepted_tasks(
            run_id=str(run.pk), platform="collector", outbox_id=event.pk
        )
        == 0
    )

    event.refresh_from_db()
    assert event.completed_at is not None  # not published again and again
    assert upstream.sim.protocol("collector").cancels_asked() == {}
    assert not UpstreamCancel.objects.filter(run=run).exists()
