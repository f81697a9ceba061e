"""check_invariants: a clean run passes; each invariant, broken on purpose with direct writes,
is named with the run and sample it concerns."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db.models import F
from django.db.models.functions import Now

from analysis.models import Mention
from evidence.models import Capture
from pipeline.invariants import CHECKS, Violation, check_all, gap_counts
from sampling.models import Attempt, OutboxMessage, Run, Sample, StaleWrite
from simulator import SimulatorHandle
from tests.inprocess import drive_in_process

from .conftest import COLLECTOR, OPENAI, launch

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(simulator: SimulatorHandle, django_capture_on_commit_callbacks: Any) -> Run:
    """A finished run: collector and OpenAI, one question always failing on OpenAI."""
    simulator.script(
        {"match": "Question number 2", "fault": "auth_error", "times": None, "platform": "openai"}
    )
    run = launch(targets=[COLLECTOR, OPENAI], questions=3)
    # The test's transaction never commits: run the after-commit work (noticing the run's end)
    # as it is registered.
    with django_capture_on_commit_callbacks(execute=True):
        drive_in_process(run.pk)
    run.refresh_from_db()
    assert run.finished_at is not None
    return run


def _found(run_id: Any = None) -> dict[str, list[Violation]]:
    by_name: dict[str, list[Violation]] = {}
    for violation in check_all(run_id):
        by_name.setdefault(violation.invariant, []).append(violation)
    return by_name


def _names_sample(found: dict[str, list[Violation]], invariant: str, sample: Sample) -> str:
    hits = [v for v in found.get(invariant, []) if v.sample_id == sample.pk]
    assert hits, f"{invariant} did not name sample {sample.pk}: {found}"
    assert all(v.run_id == str(sample.run_id) for v in hits)
    assert f"sample {sample.pk}" in hits[0].message
    return hits[0].message


def _names_run(found: dict[str, list[Violation]], invariant: str, run: Run) -> str:
    hits = [v for v in found.get(invariant, []) if v.run_id == str(run.pk) and v.sample_id is None]
    assert hits, f"{invariant} did not name run {run.pk}: {found}"
    assert f"run {run.pk}" in hits[0].message
    return hits[0].message


def _succeeded(run: Run, platform: str = "collector") -> Sample:
    return Sample.objects.filter(run=run, platform=platform, analysis_state="accepted").first()  # type: ignore[return-value]


# --- the clean state -------------------------------------------------------------------------


def test_a_clean_run_passes_every_invariant(run: Run) -> None:
    samples = Sample.objects.filter(run=run)
    assert samples.filter(collection_state="failed").count() == 1  # a failure is not a violation
    assert check_all() == []
    assert check_all(run.pk) == []
    out = StringIO()
    call_command("check_invariants", stdout=out)
    assert out.getvalue().startswith(f"invariants OK — {len(CHECKS)} invariants over 1 run(s)")
    out = StringIO()
    call_command("check_invariants", "--run", str(run.pk), stdout=out)
    assert "6 samples" in out.getvalue()


def test_the_command_prints_each_violation_and_exits_non_zero(run: Run) -> None:
    sample = _succeeded(run)
    Attempt.objects.filter(sample=sample).delete()
    out = StringIO()
    with pytest.raises(CommandError, match=r"violation\(s\)"):
        call_command("check_invariants", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines and all(line.startswith("VIOLATION [") for line in lines)
    assert any(f"sample {sample.pk}" in line for line in lines)


def test_only_the_named_run_is_checked(run: Run, simulator: SimulatorHandle) -> None:
    other = launch(targets=[COLLECTOR], questions=1, name="other")
    Sample.objects.filter(run=other).update(queue_state="leased", lease_until=None)
    assert check_all(run.pk) == []
    assert _found(other.pk)["queue_state"]
    with pytest.raises(CommandError, match="no run with id"):
        call_command("check_invariants", "--run", "00000000-0000-0000-0000-000000000000")


# --- 1. every planned sample accounted for exactly once -------------------------------------


def test_a_missing_sample_is_named(run: Run) -> None:
    # A sample cannot be deleted (the ledger references it), so the plan grows instead.
    Run.objects.filter(pk=run.pk).update(planned_samples=7)
    found = _found()
    assert "7 samples planned but 6 exist" in _names_run(found, "planned_accounted", run)
    assert "per-platform report counts 6 samples" not in str(found["report_counts"])
    assert "pending=1, SQL count says 0" in _names_run(found, "report_counts", run)
    # The auditable report refuses this run too, and the checker names its difference.
    assert f"run {run.pk}: report: " in str(found["report_counts"])


def test_a_succeeded_sample_still_queued_is_named(run: Run) -> None:
    sample = _succeeded(run)
    Sample.objects.filter(pk=sample.pk).update(queue_state="ready")  # succeeded, not terminal
    found = _found()
    message = _names_sample(found, "planned_accounted", sample)
    assert "is succeeded but not terminal" in message
    # The report's own buckets then add up to more than planned.
    assert "buckets sum to 7" in _names_run(found, "report_counts", run)


def test_a_terminal_sample_in_no_bucket_is_named(run: Run) -> None:
    sample = _succeeded(run)
    Sample.objects.filter(pk=sample.pk).update(analysis_state="pending", validity="")
    assert "is in no outcome bucket" in _names_sample(_found(), "planned_accounted", sample)


# --- 2./3. accepted upstream tasks have their records ---------------------------------------


def test_an_accepted_sample_without_its_attempt_is_named(run: Run) -> None:
    sample = _succeeded(run)
    Attempt.objects.filter(sample=sample).delete()
    found = _found()
    assert "0 accepted attempt(s)" in _names_sample(found, "accepted_recorded", sample)
    assert "which no attempt of the sample recorded" in str(found["accepted_recorded"])


def test_an_accepted_attempt_on_a_sample_that_is_not_accepted_is_named(run: Run) -> None:
    sample = Sample.objects.get(run=run, collection_state="failed")
    Attempt.objects.filter(sample=sample).update(status="accepted", upstream_id="resp_x")
    message = _names_sample(_found(), "accepted_recorded", sample)
    assert "was accepted upstream (resp_x) but the sample is planned" in message


def test_an_answer_without_a_capture_is_named(run: Run) -> None:
    sample = _succeeded(run, "openai")
    Capture.objects.filter(sample=sample).delete()
    assert "without a completed capture" in _names_sample(_found(), "accepted_recorded", sample)


# --- 4. no upstream task submitted twice without a recorded reason -------------------------


def test_a_second_submission_after_an_unresolved_one_is_named(run: Run) -> None:
    sample = _succeeded(run)
    first = Attempt.objects.get(sample=sample)
    Attempt.objects.filter(pk=first.pk).update(status="started", upstream_id="")
    Attempt.objects.create(
        sample=sample,
        attempt_no=2,
        idempotency_key=f"{first.idempotency_key}-again",
        fencing_token=first.fencing_token,
        status="accepted",
        upstream_id=sample.upstream_id,
    )
    found = _found()
    message = _names_sample(found, "no_blind_resubmit", sample)
    assert "attempt 1" in message and "without a recorded reason" in message
    assert "attempt 2 submitted the question again" in message
    assert any("still started" in v.message for v in found["no_blind_resubmit"])


def test_a_submission_after_a_failure_with_its_reason_is_not_a_violation(run: Run) -> None:
    sample = _succeeded(run)
    first = Attempt.objects.get(sample=sample)
    Attempt.objects.filter(pk=first.pk).update(attempt_no=2)
    Attempt.objects.create(
        sample=sample,
        attempt_no=1,
        idempotency_key=f"{first.idempotency_key}-first",
        fencing_token=1,
        status="failed",
        error_class="rate_limited",
    )
    assert "no_blind_resubmit" not in _found()


def test_an_unresolved_attempt_left_on_an_accepted_sample_is_named(run: Run) -> None:
    sample = _succeeded(run, "openai")
    Attempt.objects.filter(sample=sample).update(status="unknown")
    assert "still unknown" in _names_sample(_found(), "no_blind_resubmit", sample)


# --- 5. no result written with a stale token ------------------------------------------------


def test_a_capture_written_after_its_token_was_refused_is_named(run: Run) -> None:
    sample = _succeeded(run)
    capture = Capture.objects.get(sample=sample)
    assert capture.fencing_token is not None
    stale = StaleWrite.objects.create(
        sample=sample,
        operation="evidence",
        presented_token=capture.fencing_token,
        current_token=sample.fencing_token,
    )
    StaleWrite.objects.filter(pk=stale.pk).update(
        created_at=capture.created_at - timedelta(seconds=1)
    )
    message = _names_sample(_found(), "fencing", sample)
    assert f"after stale write {stale.pk} (evidence) refused that token" in message


def test_a_stale_write_after_the_capture_is_not_a_violation(run: Run) -> None:
    sample = _succeeded(run)
    capture = Capture.objects.get(sample=sample)
    assert capture.fencing_token is not None
    StaleWrite.objects.create(
        sample=sample,
        operation="evidence",
        presented_token=capture.fencing_token,
        current_token=sample.fencing_token,
    )
    assert "fencing" not in _found()


def test_a_token_newer_than_the_sample_is_named(run: Run) -> None:
    sample = _succeeded(run)
    Capture.objects.filter(sample=sample).update(fencing_token=F("fencing_token") + 100)
    assert "newer than the sample's" in _names_sample(_found(), "fencing", sample)


def test_two_answers_under_one_lease_are_named(run: Run) -> None:
    sample = _succeeded(run)
    capture = Capture.objects.get(sample=sample)
    capture.pk = None
    capture.revision += 1
    capture.save()
    assert "2 completed captures written under one lease" in _names_sample(
        _found(), "fencing", sample
    )


# --- 6. no sample counted twice in a denominator -------------------------------------------


def test_a_mention_counted_twice_is_named(run: Run) -> None:
    sample = _succeeded(run)
    mention = Mention.objects.filter(sample=sample).first()
    assert mention is not None
    capture = Capture.objects.get(sample=sample)
    capture.pk = None
    capture.revision += 1
    capture.fencing_token = None  # a re-parse, outside any lease
    capture.save()
    mention.pk = None
    mention.capture = capture
    mention.save()
    message = _names_sample(_found(), "mentions_once", sample)
    assert f"entity {mention.entity!r} has 2 mention rows (from 2 capture(s))" in message


# --- 7. queue and run states ------------------------------------------------------------------


def test_queue_states_that_cannot_happen_are_named(run: Run) -> None:
    leased, parked, uncertain = Sample.objects.filter(run=run, platform="collector")[:3]
    hidden = Sample.objects.filter(run=run, platform="openai", analysis_state="accepted")[0]
    Sample.objects.filter(pk=leased.pk).update(queue_state="leased", step="poll", lease_until=None)
    Sample.objects.filter(pk=parked.pk).update(queue_state="parked", step="poll", failure_reason="")
    Sample.objects.filter(pk=uncertain.pk).update(submission_state="uncertain")
    # Parked (say as a poison message) while its submission is in flight: an acceptance
    # nobody resolves, and the run's status does not count it as uncertain.
    Sample.objects.filter(pk=hidden.pk).update(
        submission_state="submitting", queue_state="parked", step="submit", failure_reason="x"
    )
    found = _found()
    assert "leased without lease_until" in _names_sample(found, "queue_state", leased)
    assert "parked without a reason" in _names_sample(found, "queue_state", parked)
    assert "uncertain but not waiting" in _names_sample(found, "queue_state", uncertain)
    assert "submitting outside a submit step" in _names_sample(found, "queue_state", hidden)
    assert "is marked finished but 3 of its samples are not terminal" in _names_run(
        found, "queue_state", run
    )


def test_a_complete_run_not_marked_finished_is_named(run: Run) -> None:
    Run.objects.filter(pk=run.pk).update(finished_at=None)
    assert "not marked finished" in _names_run(_found(), "queue_state", run)


def test_outbox_gaps_are_named(run: Run) -> None:
    OutboxMessage.objects.filter(dedupe_key=f"run-finished:{run.pk}").delete()
    old = OutboxMessage.objects.create(
        task="pipeline.run_finished", payload={"run_id": str(run.pk)}
    )
    OutboxMessage.objects.filter(pk=old.pk).update(created_at=Now() - timedelta(hours=1))
    found = _found()
    assert "run-finished message was never written" in _names_run(found, "outbox", run)
    assert any(f"outbox message {old.pk}" in v.message for v in found["outbox"])


# --- 8. at most one charge per sample -------------------------------------------------------


def _charge(sample: Sample, key: str) -> None:
    from billing.services import funding_account, post_entry, revenue_account

    run = Run.objects.get(pk=sample.run_id)
    post_entry(
        idempotency_key=key,
        kind="capture",
        legs=[(funding_account("USD"), -40), (revenue_account(run.tenant, "USD"), 40)],
        tenant=run.tenant,
        run=run,
        sample_id=sample.pk,
        platform=sample.platform,
    )


def test_a_sample_charged_twice_is_named(run: Run) -> None:
    from billing.models import SampleSettlement

    sample = _succeeded(run)
    # Charged once: a settlement line of the run's batch capture entry.
    assert SampleSettlement.objects.filter(sample=sample, reason="completed").count() == 1
    assert "one_charge" not in _found()
    _charge(sample, f"capture:sample:{sample.pk}:again")
    message = _names_sample(_found(), "one_charge", sample)
    assert "is charged by 2 capture entries" in message


def test_a_failed_sample_charged_is_named(run: Run) -> None:
    sample = Sample.objects.get(run=run, collection_state="failed")
    _charge(sample, f"capture:sample:{sample.pk}:wrong")
    assert "charged but its collection is failed" in _names_sample(_found(), "one_charge", sample)


# --- an event is done when its effect is: held money, unconsumed events -----------------------


def _run_end_event(run: Run) -> OutboxMessage:
    return OutboxMessage.objects.get(dedupe_key=f"run-finished:{run.pk}")


def _held(run: Run) -> int:
    from billing.models import Account

    return sum(Account.objects.filter(run=run, kind="hold").values_list("balance", flat=True))


def _lose_the_run_end_event(run: Run) -> OutboxMessage:
    """What Redis restarted empty does to a run-finished event already relayed: published an
    hour ago (the run finished then), its message gone, its consumer never ran."""
    Run.objects.filter(pk=run.pk).update(finished_at=Now() - timedelta(hours=1))
    OutboxMessage.objects.filter(dedupe_key=f"run-finished:{run.pk}").update(
        created_at=Now() - timedelta(hours=1), sent_at=Now() - timedelta(hours=1)
    )
    return _run_end_event(run)


def test_a_lost_run_end_event_fails_the_checks_until_the_sweeper_settled_the_run(
    run: Run, settings: Any
) -> None:
    from api.models import WebhookDelivery, WebhookEndpoint
    from billing.models import SampleSettlement
    from pipeline.sweeps import run_sweeps

    settings.GEO_OUTBOX_REDELIVER_SECONDS = 0  # the sweep is due at every tick

    WebhookEndpoint.objects.create(tenant=run.tenant, url="https://hooks.example/x", secret="s")
    failed = Sample.objects.get(run=run, collection_state="failed")
    assert not SampleSettlement.objects.filter(sample=failed).exists()  # never settled
    held = _held(run)
    assert held > 0
    event = _lose_the_run_end_event(run)

    found = _found(run.pk)
    assert f"still holds {held} minor units" in _names_run(found, "settled", run)
    (unconsumed,) = [v for v in found["outbox"] if f"outbox message {event.pk}" in v.message]
    assert "published but not completed" in unconsumed.message
    assert unconsumed.run_id == str(run.pk)
    with pytest.raises(CommandError, match=r"violation\(s\)"):
        call_command("check_invariants", stdout=StringIO())
    gaps = gap_counts()  # what the metrics expose (geo_integrity_gaps)
    assert gaps["held_after_finish"] == 1 and gaps["event_not_completed"] == 1

    assert run_sweeps()["pipeline.held_runs"] == 1  # the dispatcher's bookkeeping sweeps
    assert _held(run) == 0
    assert SampleSettlement.objects.get(sample=failed).reason == "failed"
    event.refresh_from_db()
    assert event.completed_at is not None  # the whole chain ran: the event is done
    assert list(WebhookDelivery.objects.filter(run=run).values_list("event", flat=True)) == [
        "run.finished"
    ]
    assert check_all() == []
    call_command("check_invariants", stdout=StringIO())
    assert set(gap_counts().values()) == {0}
    assert run_sweeps()["pipeline.held_runs"] == 0  # nothing left to settle


def test_the_sweeper_leaves_a_settlement_in_progress_alone(run: Run) -> None:
    from pipeline.runs import settle_held_runs

    held = _held(run)
    assert held > 0 and _run_end_event(run).sent_at is None  # just written, not yet relayed
    assert settle_held_runs() == 0
    OutboxMessage.objects.filter(pk=_run_end_event(run).pk).update(sent_at=Now())
    assert settle_held_runs() == 0  # published a moment ago: its consumer is on it
    assert _held(run) == held
    assert "settled" not in _found(run.pk)  # it finished a moment ago


def test_the_sweeper_settles_again_a_completed_run_that_still_holds_money(run: Run) -> None:
    """An event marked completed whose settlement never ran (as the migration marks every
    event relayed before completion was recorded): settled, without telling the followers
    again."""
    from api.models import WebhookDelivery, WebhookEndpoint
    from pipeline.runs import settle_held_runs

    WebhookEndpoint.objects.create(tenant=run.tenant, url="https://hooks.example/x", secret="s")
    event = _lose_the_run_end_event(run)
    OutboxMessage.objects.filter(pk=event.pk).update(completed_at=F("sent_at"))
    assert "settled" in _found(run.pk)
    assert settle_held_runs() == 1
    assert _held(run) == 0
    assert not WebhookDelivery.objects.exists()  # the end was told when the event completed
    assert check_all() == []


def test_attempts_left_started_and_answers_without_cost_are_named(run: Run) -> None:
    failed = Sample.objects.get(run=run, collection_state="failed")
    Attempt.objects.filter(sample=failed).update(status="started")
    answered = _succeeded(run, platform="openai")
    Attempt.objects.filter(sample=answered).update(status="started")
    found = _found()
    assert gap_counts()["attempt_left_started"] == 2
    assert "attempt 1 is still started" in _names_sample(found, "attempts_closed", failed)
    assert "upstream cost were never recorded" in _names_sample(found, "attempts_closed", answered)


def test_a_costed_answer_never_booked_is_named(run: Run) -> None:
    from billing.models import JournalEntry

    answered = _succeeded(run, platform="openai")
    attempt = Attempt.objects.get(sample=answered, status="accepted")
    assert attempt.cost, "the simulator reports usage and the model has a price"
    JournalEntry.objects.filter(idempotency_key=f"upstream-cost:attempt:{attempt.pk}").delete()
    assert "attempts_closed" not in _found()  # the run finished a moment ago
    Run.objects.filter(pk=run.pk).update(finished_at=Now() - timedelta(hours=1))
    message = _names_sample(_found(), "attempts_closed", answered)
    assert gap_counts()["answer_cost_unbooked"] >= 1
    assert f"costing {attempt.cost} {attempt.cost_currency} upstream, never booked" in message
