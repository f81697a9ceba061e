"""Resume by the valid-completed set, in-process: a scripted upstream gives each question its
own fate (valid, login page, refused, unparseable); the run is resumed and every sample that
was not valid and completed is asked again as a new attempt, the valid one is kept untouched,
and the money and invariants still add up. The real-process version is
tests/e2e/test_resume_end_to_end.py."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from billing.checks import verify_ledger
from billing.models import SampleSettlement
from billing.selectors import run_billing
from connectors.base import ErrorClass, PollOutcome, SampleRequest, SubmitOutcome, UpstreamError
from connectors.retry import GAVE_UP_POLLING
from evidence.models import Capture
from pipeline import step_context
from pipeline.invariants import check_all
from pipeline.resume import ResumeRefused, resume_run
from pipeline.runs import finish_run_if_done, on_run_finished
from sampling.models import Attempt, Run, Sample, SampleReopen
from sampling.selectors import run_status
from tests.conftest import launch_funded, make_campaign_data
from tests.inprocess import drive_in_process
from tests.pipeline.test_execution import ANSWER, ScriptedUpstream, _result

pytestmark = pytest.mark.django_db

QUESTIONS = ["valid: which CRM?", "login: which CRM?", "refused: which CRM?", "garbled: which?"]


class FatedUpstream(ScriptedUpstream):
    """Answers by the question's first word, until `healed`: then every answer is valid."""

    healed = False

    def submit(self, request: SampleRequest, *, attempt_no: int = 1) -> SubmitOutcome:
        self.calls.append(f"submit:{request.question.split(':')[0]}:{attempt_no}")
        fate = "valid" if self.healed else request.question.split(":")[0]
        if fate == "refused":
            raise UpstreamError(ErrorClass.AUTH, "invalid key", status_code=401)
        if fate == "garbled":
            result = _result("", state="failed", error={"class": "parse_failed", "message": "?"})
        else:
            result = _result("Please log in to continue." if fate == "login" else ANSWER)
        result.sample_id = request.sample_id
        return SubmitOutcome(upstream_id="up-1", result=result)


@pytest.fixture
def upstream(monkeypatch: pytest.MonkeyPatch) -> FatedUpstream:
    fated = FatedUpstream(asynchronous=False)
    monkeypatch.setattr(step_context, "get_connector", lambda platform: fated)
    return fated


def _finish(run: Run) -> None:
    """What the run-finished outbox event does after commit (no commit in this test)."""
    drive_in_process(run.pk)
    assert finish_run_if_done(run_id=run.pk)
    on_run_finished(run_id=run.pk)


def _launch() -> Run:
    data = make_campaign_data(
        questions=0,
        targets=[{"platform": "openai", "device": "desktop", "region": "us", "mode": "web_search"}],
        repeats=1,
    )
    data.update(questions=QUESTIONS, screenshot_policy="none")
    return launch_funded(data)


def _by_question(run: Run) -> dict[str, Sample]:
    samples = Sample.objects.filter(run=run).select_related("question_revision")
    return {s.question_revision.text.split(":")[0]: s for s in samples}


def _dry_run(run: Run) -> dict[str, Any]:
    out = StringIO()
    call_command("resume_run", str(run.pk), "--dry-run", stdout=out)
    return json.loads(out.getvalue())


def test_resume_asks_exactly_the_not_valid_completed_samples_again(upstream: Any) -> None:
    run = _launch()
    _finish(run)
    assert run_status(run_id=run.pk).outcome == "partially_succeeded"
    before = _by_question(run)
    valid = before["valid"]
    kept_row = Sample.objects.filter(pk=valid.pk).values().get()
    kept_captures = list(Capture.objects.filter(sample=valid).values())

    plan = _dry_run(run)

    assert plan == {
        "redo": 3,
        "kept": 1,
        "by_reason": {"analysis_review": 1, "failed": 1, "invalid:login_page": 1},
    }
    assert not SampleReopen.objects.exists()  # a dry run changes nothing

    upstream.healed = True
    applied = resume_run(run_id=run.pk, actor="test")
    assert applied.as_dict() == plan
    _finish(run)

    after = _by_question(run)
    assert run_status(run_id=run.pk).outcome == "all_succeeded"
    for name in ("login", "refused", "garbled"):
        sample = after[name]
        assert sample.attempts == before[name].attempts + 1
        assert sample.resumes == 1
        latest = Attempt.objects.filter(sample=sample).order_by("-attempt_no").first()
        assert latest is not None and latest.attempt_no == before[name].attempts + 1
        assert SampleReopen.objects.get(sample=sample).attempts_before == before[name].attempts
    # The valid sample is untouched: same row, same captures, never asked again.
    assert Sample.objects.filter(pk=valid.pk).values().get() == kept_row
    assert list(Capture.objects.filter(sample=valid).values()) == kept_captures
    assert [c for c in upstream.calls if c.startswith("submit:valid")] == ["submit:valid:1"]

    money = run_billing(run_id=run.pk)
    assert money.balanced and money.held == 0
    assert money.samples_charged == 4  # each once
    unit = SampleSettlement.objects.filter(sample=valid).get().reserved
    assert money.reheld == 3 * unit  # all three were released at the first end; held again
    assert [v.message for v in check_all(run.pk)] == []
    assert verify_ledger().violations == []


def test_resume_refuses_a_run_with_samples_in_flight(upstream: Any) -> None:
    run = _launch()
    waiting = Sample.objects.filter(run=run).first()
    assert waiting is not None
    # Accepted upstream, polled later: a worker will pick it up again.
    Sample.objects.filter(pk=waiting.pk).update(
        step="poll", submission_state="accepted", attempts=1
    )

    with pytest.raises(ResumeRefused, match="1 sample"):
        resume_run(run_id=run.pk)
    with pytest.raises(CommandError, match="still in flight"):
        call_command("resume_run", str(run.pk), "--dry-run")


def test_resume_of_an_unknown_run_names_it() -> None:
    with pytest.raises(CommandError, match="no run with id 'nope'"):
        call_command("resume_run", "nope")


class ProviderTasks(ScriptedUpstream):
    """A provider that accepts one task per question. Its polls fail (503) for "slow" tasks
    and report the "gone" ones failed; once `healed`, every task has completed."""

    healed = False

    def submit(self, request: SampleRequest, *, attempt_no: int = 1) -> SubmitOutcome:
        fate = request.question.split(":")[0]
        self.calls.append(f"submit:{fate}:{attempt_no}")
        return SubmitOutcome(upstream_id=f"task-{fate}-{attempt_no}")

    def poll(self, upstream_id: str) -> PollOutcome:
        self.calls.append(f"poll:{upstream_id}")
        if self.healed:
            return PollOutcome(state="completed")
        if upstream_id.startswith("task-gone"):
            return PollOutcome(state="failed", message="the provider failed it")
        raise UpstreamError(ErrorClass.TRANSIENT, "503")

    def fetch_evidence(self, upstream_id: str, *, sample_id: int | None = None) -> Any:
        result = _result(ANSWER)
        result.sample_id, result.upstream_id = sample_id, upstream_id
        return result


def test_resume_polls_a_task_we_gave_up_on_and_submits_no_second_one(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    provider = ProviderTasks(asynchronous=True)
    monkeypatch.setattr(step_context, "get_connector", lambda platform: provider)
    settings.GEO_POLL_DEADLINE_SECONDS = 0  # the first failed poll is past the deadline
    data = make_campaign_data(
        questions=0,
        targets=[
            {"platform": "collector", "device": "desktop", "region": "us", "mode": "web_search"}
        ],
        repeats=1,
    )
    data.update(questions=["slow: which CRM?", "gone: which CRM?"], screenshot_policy="none")
    run = launch_funded(data)
    _finish(run)
    before = _by_question(run)
    assert before["slow"].failure_reason.startswith(GAVE_UP_POLLING)
    assert before["gone"].failure_reason.startswith("upstream reports failed")

    provider.healed = True
    resume_run(run_id=run.pk, actor="test")
    reopened = _by_question(run)
    _finish(run)

    slow = reopened["slow"]
    # The task we gave up on is polled again, under the same task and attempt.
    assert (slow.step, slow.submission_state, slow.upstream_id) == (
        "poll",
        "accepted",
        "task-slow-1",
    )
    assert reopened["gone"].step == "submit"  # the provider ended that task: asked again
    after = _by_question(run)
    assert run_status(run_id=run.pk).outcome == "all_succeeded"
    assert (after["slow"].attempts, after["slow"].upstream_id) == (1, "task-slow-1")
    submits = [c for c in provider.calls if c.startswith("submit:")]
    assert sorted(submits) == ["submit:gone:1", "submit:gone:2", "submit:slow:1"]
    assert Attempt.objects.filter(sample=after["slow"]).count() == 1
    assert [v.message for v in check_all(run.pk)] == []
    assert verify_ledger().violations == []
