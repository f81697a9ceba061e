"""Every branch of the step logic, in-process and fast.

The upstream is the one thing replaced: a scripted connector answers at the connector
interface, so each test names the upstream's behaviour and checks what the step wrote
(layers, queue state, attempts, captures, stale-write records) in the real database. Delivery,
crashes and real protocols are proven by the real-process suites (tests/e2e, tests/durability).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db.models.functions import Now
from django.test import override_settings

from analysis.models import AnalysisResult, AnalysisRevision, Mention
from analysis.reports import build_run_report
from billing.costs import book_pending_attempt_costs
from billing.models import PendingCapture, SampleSettlement
from billing.reconciliation import reconcile
from billing.selectors import run_billing
from connectors.base import (
    Attachment,
    Capabilities,
    Connector,
    ConnectorConfig,
    ErrorClass,
    NormalizedResult,
    PollOutcome,
    SampleRequest,
    SubmitOutcome,
    UpstreamError,
)
from connectors.retry import GAVE_UP_POLLING
from evidence.models import Capture
from evidence.services import decide_review
from geo_collect.settings import platform_settings
from pipeline import circuits, execution, repair, step_context
from pipeline.invariants import check_all, check_no_unrecorded_resubmit
from pipeline.repair import repair_evidence
from pipeline.runs import finish_run_if_done, on_run_finished
from sampling.leases import Claim, claim_sample, renew_lease
from sampling.models import (
    Attempt,
    AttemptStatus,
    QueueState,
    Run,
    Sample,
    StaleWrite,
    Step,
    SubmissionState,
)
from sampling.transitions import ReviewNotAllowed
from simulator.png import screenshot_png
from tests.conftest import launch_funded, make_campaign_data

pytestmark = pytest.mark.django_db

ANSWER = "For a small team, Acme CRM is the simplest choice; Globex is an alternative."
UpstreamCall = Callable[..., Any]


class ScriptedUpstream(Connector):
    """Answers each operation from a script: a value to return or an exception to raise."""

    platform = "scripted"

    def __init__(self, *, asynchronous: bool, **script: Any) -> None:
        super().__init__(ConnectorConfig(platform="scripted", base_url="http://127.0.0.1:9"))
        self.asynchronous = asynchronous
        self.script = script
        self.calls: list[str] = []

    def capabilities(self) -> Capabilities:
        return Capabilities(
            platform="scripted",
            devices=frozenset({"desktop"}),
            regions=frozenset({"us"}),
            modes=frozenset({"web_search"}),
            screenshots=False,
            submission_limit=100,
            asynchronous=self.asynchronous,
            supports_lookup=self.asynchronous,
        )

    def _answer(self, operation: str) -> Any:
        self.calls.append(operation)
        outcome = self.script[operation]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def submit(self, request: SampleRequest, *, attempt_no: int = 1) -> SubmitOutcome:
        outcome = self._answer("submit")
        if outcome.result is not None:
            outcome.result.sample_id = request.sample_id
        return outcome

    def poll(self, upstream_id: str) -> PollOutcome:
        return self._answer("poll")

    def fetch_evidence(self, upstream_id: str, *, sample_id: int | None = None) -> NormalizedResult:
        return self._answer("fetch_evidence")

    def lookup(self, idempotency_key: str) -> str | None:
        return self._answer("lookup")

    @classmethod
    def parse(
        cls, raw: bytes, *, content_type: str = "", sample_id: int | None = None
    ) -> NormalizedResult:
        raise NotImplementedError


def _result(text: str = ANSWER, *, state: str = "completed", **extra: Any) -> NormalizedResult:
    return NormalizedResult(
        sample_id=None,
        upstream_id="up-1",
        collection_state=state,
        evidence_state="stored" if state == "completed" else "failed",
        answer_text=text,
        raw=text.encode(),
        raw_mime="text/plain",
        **extra,
    )


@pytest.fixture
def upstream(monkeypatch: pytest.MonkeyPatch) -> Callable[..., ScriptedUpstream]:
    def install(*, asynchronous: bool = False, **script: Any) -> ScriptedUpstream:
        scripted = ScriptedUpstream(asynchronous=asynchronous, **script)
        for module in (step_context, repair):
            monkeypatch.setattr(module, "get_connector", lambda platform: scripted)
        return scripted

    return install


@pytest.fixture
def never_sent(upstream: Callable[..., ScriptedUpstream]) -> ScriptedUpstream:
    """An upstream the test expects never to be called (its `calls` must stay empty)."""
    return upstream(submit=SubmitOutcome(upstream_id="never"))


# (submission_state, step, queue_state) of a sample planned to be submitted again.
SUBMIT_AGAIN = ("planned", "submit", "ready")


def _sample(platform: str = "openai") -> Sample:
    data = make_campaign_data(
        questions=1,
        targets=[{"platform": platform, "device": "desktop", "region": "us", "mode": "web_search"}],
        repeats=1,
    )
    data["screenshot_policy"] = "none"
    run = launch_funded(data)
    return Sample.objects.get(run=run)


def _claim(sample: Sample, owner: str = "test") -> Claim:
    """Lease the sample for a minute; the claim must succeed."""
    claim = claim_sample(sample_id=sample.pk, owner=owner, lease_seconds=60)
    assert claim is not None
    return claim


def _step(sample: Sample, step: str | None = None, **fields: Any) -> tuple[str, Sample]:
    """Put the sample at `step` (with any other fields), claim it and run the step once."""
    Sample.objects.filter(pk=sample.pk).update(**({"step": step} if step else {}), **fields)
    claim = _claim(sample)
    outcome = execution.run_step(sample_id=sample.pk, token=claim.token, worker="test")
    return outcome, Sample.objects.get(pk=sample.pk)


# --- submit -----------------------------------------------------------------------------------


def test_a_direct_answer_is_collected_and_analysed_in_one_step(upstream: Any) -> None:
    upstream(submit=SubmitOutcome(upstream_id="resp-1", result=_result()))

    outcome, sample = _step(_sample())

    assert outcome == "answered"
    assert (sample.submission_state, sample.collection_state, sample.evidence_state) == (
        "accepted",
        "completed",
        "stored",
    )
    # The rule analyser is local: the answer is analysed in the same fenced write.
    assert (sample.analysis_state, sample.validity) == ("accepted", "valid")
    assert (sample.step, sample.queue_state) == (Step.NONE, "done")
    capture = Capture.objects.get(sample=sample)
    result = AnalysisResult.objects.get(sample_id=sample.pk)
    assert (result.capture_id, result.revision.number, result.valid) == (capture.pk, 1, True)
    assert Mention.objects.filter(sample_id=sample.pk, capture=capture, is_brand=True).exists()
    assert PendingCapture.objects.filter(sample_id=sample.pk).count() == 1
    assert Attempt.objects.get(sample=sample).status == AttemptStatus.ACCEPTED


def test_an_answer_goes_to_the_analysis_queue_when_inline_analysis_is_off(
    upstream: Any, settings: Any
) -> None:
    settings.GEO_ANALYSE_INLINE = False
    upstream(submit=SubmitOutcome(upstream_id="resp-1", result=_result()))

    outcome, sample = _step(_sample())

    assert outcome == "answered"
    assert (sample.submission_state, sample.collection_state) == ("accepted", "completed")
    assert (sample.step, sample.queue_state, sample.evidence_state) == (
        Step.ANALYSE,
        "ready",
        "stored",
    )
    assert sample.upstream_id == "resp-1"
    attempt = Attempt.objects.get(sample=sample)
    assert (attempt.status, attempt.attempt_no) == (AttemptStatus.ACCEPTED, 1)
    assert Capture.objects.get(sample=sample).answer_text == ANSWER


def test_an_asynchronous_acceptance_records_the_task_id_and_polls_next(upstream: Any) -> None:
    upstream(asynchronous=True, submit=SubmitOutcome(upstream_id="task-9"))

    outcome, sample = _step(_sample("collector"))

    assert outcome == "accepted"
    assert (sample.submission_state, sample.step, sample.upstream_id) == (
        "accepted",
        "poll",
        "task-9",
    )
    assert Attempt.objects.get(sample=sample).upstream_id == "task-9"


def test_a_truncated_answer_is_kept_and_asked_again_as_a_new_attempt(upstream: Any) -> None:
    truncated = _result("For a small team", state="truncated", error={"class": "truncated"})
    upstream(submit=SubmitOutcome(upstream_id="resp-1", result=truncated))

    outcome, sample = _step(_sample())

    assert outcome == "retry:truncated"
    assert (sample.submission_state, sample.step, sample.queue_state) == SUBMIT_AGAIN
    assert Capture.objects.get(sample=sample).collection_state == "truncated"  # raw kept


def test_a_rate_limited_submit_is_retried_later(upstream: Any) -> None:
    upstream(submit=UpstreamError(ErrorClass.RATE_LIMITED, "slow down", retry_after=2.0))

    outcome, sample = _step(_sample())

    assert outcome == "retry:rate_limited"
    assert (sample.submission_state, sample.step, sample.queue_state) == SUBMIT_AGAIN
    assert Attempt.objects.get(sample=sample).retry_after_seconds == 2.0


def test_an_auth_failure_fails_the_sample_without_retrying(upstream: Any) -> None:
    upstream(submit=UpstreamError(ErrorClass.AUTH, "invalid key", status_code=401))

    outcome, sample = _step(_sample())

    assert outcome == "failed:auth"
    assert (sample.collection_state, sample.queue_state) == ("failed", "done")
    assert sample.failure_reason == "auth: invalid key"
    # Nothing will ever be analysed: evidence and analysis end too, with the reason.
    assert (sample.evidence_state, sample.evidence_reason) == (
        "failed",
        "no answer collected: auth: invalid key",
    )
    assert (sample.analysis_state, sample.analysis_reason) == ("failed", "not_collected")


def test_the_report_shows_missing_evidence_per_platform_with_the_reason(upstream: Any) -> None:
    upstream(submit=UpstreamError(ErrorClass.AUTH, "invalid key", status_code=401))
    _, sample = _step(_sample())

    report = build_run_report(run_id=sample.run_id, with_trend=False).as_dict()

    [openai] = report["evidence_by_platform"]
    assert (openai["platform"], openai["failed"], openai["pending"]) == ("openai", 1, 0)
    assert openai["evidence_missing_rate"]["value"] == 1.0
    assert openai["reasons"] == {"no answer collected": 1}


def test_an_unknown_acceptance_makes_the_sample_uncertain_and_verifies_next(upstream: Any) -> None:
    upstream(submit=UpstreamError(ErrorClass.ACCEPTANCE_UNKNOWN, "read timed out"))

    outcome, sample = _step(_sample())

    assert outcome == "uncertain"
    assert (sample.submission_state, sample.step) == ("uncertain", "verify")
    assert Attempt.objects.get(sample=sample).status == AttemptStatus.UNKNOWN


def test_a_sample_left_submitting_by_a_vanished_worker_is_verified_not_resent(
    never_sent: ScriptedUpstream,
) -> None:
    sample = _sample()
    Attempt.objects.create(sample=sample, attempt_no=1, idempotency_key="k", fencing_token=0)

    outcome, sample = _step(sample, submission_state=SubmissionState.SUBMITTING)

    assert outcome == "uncertain"
    assert (sample.submission_state, sample.step) == ("uncertain", "verify")
    assert never_sent.calls == []


def test_a_second_copy_of_the_message_under_the_same_lease_touches_nothing(
    never_sent: ScriptedUpstream,
) -> None:
    sample = _sample()
    claim = _claim(sample)
    Sample.objects.filter(pk=sample.pk).update(submission_state=SubmissionState.SUBMITTING)
    Attempt.objects.create(
        sample=sample, attempt_no=1, idempotency_key="k", fencing_token=claim.token
    )

    outcome = execution.run_step(sample_id=sample.pk, token=claim.token, worker="copy")

    assert outcome == "duplicate-in-flight"
    assert Sample.objects.get(pk=sample.pk).submission_state == SubmissionState.SUBMITTING
    assert never_sent.calls == []


def test_a_cancelled_run_never_sends_its_due_samples(never_sent: ScriptedUpstream) -> None:
    sample = _sample()
    Run.objects.filter(pk=sample.run_id).update(cancelled_at=Now())

    outcome, sample = _step(sample)

    assert outcome == "cancelled"
    assert (sample.collection_state, sample.failure_reason) == ("failed", "cancelled by operator")
    assert never_sent.calls == []


# --- claims and tokens --------------------------------------------------------------------------


def test_a_message_with_an_old_token_does_nothing(never_sent: ScriptedUpstream) -> None:
    sample = _sample()
    first = _claim(sample, owner="a")
    Sample.objects.filter(pk=sample.pk).update(queue_state=QueueState.READY)
    assert claim_sample(sample_id=sample.pk, owner="b", lease_seconds=60) is not None

    assert execution.run_step(sample_id=sample.pk, token=first.token) == "stale-message"
    assert never_sent.calls == []


def test_a_result_written_after_a_takeover_is_refused_and_recorded(upstream: Any) -> None:
    sample = _sample()

    def taken_over(request: SampleRequest, *, attempt_no: int = 1) -> SubmitOutcome:
        Sample.objects.filter(pk=sample.pk).update(fencing_token=99)  # another worker's claim
        return SubmitOutcome(upstream_id="resp-1", result=_result())

    scripted = upstream()
    scripted.submit = taken_over  # type: ignore[method-assign]

    outcome, after = _step(sample)

    assert outcome == "stale-write-refused"
    assert StaleWrite.objects.filter(sample=sample, current_token=99).exists()
    assert after.collection_state == "queued"


def test_a_step_claimed_too_often_is_parked_with_the_reason(upstream: Any) -> None:
    upstream(submit=SubmitOutcome(upstream_id="never"))

    outcome, sample = _step(_sample(), claims=50)

    assert outcome == "parked"
    assert sample.queue_state == QueueState.PARKED
    assert sample.failure_reason.startswith("poison: step submit claimed")


def test_an_unexpected_exception_gives_the_lease_back_with_a_backoff(upstream: Any) -> None:
    upstream(submit=KeyError("surprise"))

    outcome, sample = _step(_sample())

    assert outcome == "retry-later:submit"
    assert (sample.queue_state, sample.lease_owner) == ("ready", "")


# --- verify -------------------------------------------------------------------------------------


def _uncertain(platform: str = "collector") -> Sample:
    sample = _sample(platform)
    Sample.objects.filter(pk=sample.pk).update(submission_state=SubmissionState.UNCERTAIN)
    Attempt.objects.create(
        sample=sample,
        attempt_no=1,
        idempotency_key="key-1",
        status=AttemptStatus.UNKNOWN,
        fencing_token=0,
    )
    return sample


def test_verify_finds_the_task_by_idempotency_key_and_polls_it(upstream: Any) -> None:
    upstream(asynchronous=True, lookup="task-7")

    outcome, sample = _step(_uncertain(), Step.VERIFY)

    assert outcome == "verified-accepted"
    assert (sample.submission_state, sample.upstream_id, sample.step) == (
        "accepted",
        "task-7",
        "poll",
    )


def test_verify_without_a_task_sends_the_question_again(upstream: Any) -> None:
    upstream(asynchronous=True, lookup=None)

    outcome, sample = _step(_uncertain(), Step.VERIFY)

    assert outcome == "verified-not-accepted"
    assert (sample.submission_state, sample.step) == ("planned", "submit")
    assert Attempt.objects.get(sample=sample).status == AttemptStatus.FAILED


def test_verify_on_a_platform_that_cannot_tell_parks_the_sample_for_review(upstream: Any) -> None:
    upstream(lookup=UpstreamError(ErrorClass.UNSUPPORTED, "no lookup"))

    outcome, sample = _step(_uncertain("openai"), Step.VERIFY)

    assert outcome == "parked"
    assert (sample.queue_state, sample.submission_state) == ("parked", "uncertain")


def _reask_after(settings: Any, seconds: str) -> None:
    openai = {**settings.GEO_PLATFORMS.get("openai", {}), "UNCERTAIN_REASK_SECONDS": seconds}
    settings.GEO_PLATFORMS = {**settings.GEO_PLATFORMS, "openai": openai}


def test_an_uncertain_direct_sample_is_asked_again_by_its_platform_policy(
    upstream: Any, settings: Any
) -> None:
    _reask_after(settings, "0")
    scripted = upstream(
        lookup=UpstreamError(ErrorClass.UNSUPPORTED, "no lookup"),
        submit=SubmitOutcome(upstream_id="resp-2", result=_result()),
    )
    uncertain = _uncertain("openai")
    Sample.objects.filter(pk=uncertain.pk).update(attempts=1)

    outcome, sample = _step(uncertain, Step.VERIFY)

    assert outcome == "uncertain-reasked"
    assert (sample.submission_state, sample.step, sample.queue_state) == (
        "planned",
        "submit",
        "ready",
    )
    first = Attempt.objects.get(sample=sample, attempt_no=1)
    assert (first.status, first.error_class) == (AttemptStatus.FAILED, "reasked_unknown")
    assert first.finished_at is not None
    assert _step(sample, due_at=Now())[0] == "answered"
    assert scripted.calls == ["lookup", "submit"]
    second = Attempt.objects.get(sample=sample, attempt_no=2)
    assert second.status == AttemptStatus.ACCEPTED
    # The first attempt's upstream cost is unknown: reconciliation lists it for a person.
    report = reconcile(run_id=sample.run_id)
    unknown = [r for r in report.rows if r.status == "cost_unknown"]
    assert [(r.sample_id, r.upstream_id) for r in unknown] == [
        (sample.pk, "(unknown: attempt key-1)")
    ]
    assert report.totals["cost_unknown"] == 1
    # The second attempt followed the first with a recorded reason: not a blind resubmit.
    assert check_no_unrecorded_resubmit(sample.run_id) == []


def test_an_uncertain_direct_sample_waits_for_its_policy_time_before_it_is_asked_again(
    upstream: Any, settings: Any
) -> None:
    _reask_after(settings, "300")
    scripted = upstream(lookup=UpstreamError(ErrorClass.UNSUPPORTED, "no lookup"))

    outcome, sample = _step(
        _uncertain("openai"), Step.VERIFY, claims=settings.GEO_MAX_STEP_CLAIMS - 1
    )

    assert outcome == "retry-later:verify"
    assert (sample.submission_state, sample.queue_state, sample.claims) == (
        "uncertain",
        "ready",
        0,
    )
    assert scripted.calls == ["lookup"]
    wait = (sample.due_at - Attempt.objects.get(sample=sample).started_at).total_seconds()
    assert 295 <= wait <= 305


def test_an_uncertain_policy_that_is_not_a_number_of_seconds_is_named(
    upstream: Any, settings: Any
) -> None:
    _reask_after(settings, "soon")

    with pytest.raises(ImproperlyConfigured, match="GEO_OPENAI_UNCERTAIN_REASK_SECONDS"):
        step_context.uncertain_reask_seconds("openai")


def test_verify_that_fails_is_tried_again_later(upstream: Any) -> None:
    upstream(asynchronous=True, lookup=UpstreamError(ErrorClass.TRANSIENT, "502"))

    outcome, sample = _step(_uncertain(), Step.VERIFY)

    assert outcome == "retry-later:verify"
    assert sample.submission_state == "uncertain"


# --- poll and evidence ----------------------------------------------------------------------------


def _accepted() -> Sample:
    sample = _sample("collector")
    Sample.objects.filter(pk=sample.pk).update(
        submission_state=SubmissionState.ACCEPTED, upstream_id="task-1", accepted_at=Now()
    )
    return sample


@pytest.mark.parametrize(
    ("polled", "outcome", "step", "collection"),
    [
        (PollOutcome(state="queued"), "poll:queued", "poll", "queued"),
        (PollOutcome(state="running"), "poll:running", "poll", "running"),
        (PollOutcome(state="completed"), "poll:completed", "evidence", "running"),
        (PollOutcome(state="lost", message="gone"), "failed", "none", "failed"),
    ],
)
def test_poll_follows_the_upstream_state(
    upstream: Any, polled: PollOutcome, outcome: str, step: str, collection: str
) -> None:
    upstream(asynchronous=True, poll=polled)

    got, sample = _step(_accepted(), Step.POLL)

    assert (got, sample.step, sample.collection_state) == (outcome, step, collection)
    assert sample.upstream_id == "task-1"


def test_a_poll_failure_keeps_the_task_id_and_polls_again(upstream: Any) -> None:
    upstream(asynchronous=True, poll=UpstreamError(ErrorClass.TRANSIENT, "503"))

    outcome, sample = _step(_accepted(), Step.POLL)

    assert outcome == "retry-later:poll"
    assert (sample.upstream_id, sample.step) == ("task-1", "poll")


def test_failed_polls_past_the_old_claim_cap_poll_again_and_are_not_poison(
    upstream: Any,
) -> None:
    upstream(asynchronous=True, poll=UpstreamError(ErrorClass.TRANSIENT, "503"))

    outcome, sample = _step(_accepted(), Step.POLL, claims=settings.GEO_MAX_STEP_CLAIMS - 1)

    assert outcome == "retry-later:poll"
    assert (sample.step, sample.claims, sample.queue_state) == ("poll", 0, "ready")


def test_poll_failures_past_the_task_deadline_fail_with_the_reason(upstream: Any) -> None:
    upstream(asynchronous=True, poll=UpstreamError(ErrorClass.TRANSIENT, "503"))
    late = Now() - timedelta(seconds=settings.GEO_POLL_DEADLINE_SECONDS + 1)

    outcome, sample = _step(_accepted(), Step.POLL, accepted_at=late)

    assert outcome == "failed"
    assert sample.failure_reason.startswith(GAVE_UP_POLLING)


def test_an_unreachable_platform_never_fails_an_accepted_task_past_its_deadline(
    upstream: Any,
) -> None:
    upstream(asynchronous=True, poll=UpstreamError(ErrorClass.UNREACHABLE, "not sent"))
    late = Now() - timedelta(seconds=settings.GEO_POLL_DEADLINE_SECONDS + 1)

    outcome, sample = _step(_accepted(), Step.POLL, accepted_at=late)

    assert outcome == "retry-later:poll"
    assert (sample.submission_state, sample.upstream_id) == ("accepted", "task-1")


@pytest.fixture
def counted_here() -> Iterator[None]:
    """The circuit failures this process counts are forgotten after the test."""
    yield
    circuits.forget_counted()


@pytest.mark.usefixtures("counted_here")
def test_unreachable_submits_spend_no_attempt_of_the_budget_and_are_not_poison(
    upstream: Any, settings: Any
) -> None:
    upstream(submit=UpstreamError(ErrorClass.UNREACHABLE, "not sent: refused", egress="direct"))
    sample = _sample()
    tries = settings.GEO_MAX_SUBMIT_ATTEMPTS + settings.GEO_MAX_STEP_CLAIMS

    outcomes = [_step(sample, due_at=Now())[0] for _ in range(tries)]

    assert set(outcomes) == {"retry:unreachable"}
    after = Sample.objects.get(pk=sample.pk)
    assert (after.attempts, after.step, after.claims) == (tries, "submit", 0)
    assert after.collection_state == "queued"
    # The platform then answers with errors it could have answered: those count, as before.
    upstream(submit=UpstreamError(ErrorClass.TRANSIENT, "503"))
    answered = [_step(sample, due_at=Now())[0] for _ in range(settings.GEO_MAX_SUBMIT_ATTEMPTS)]
    assert answered[-1] == "failed:transient"
    assert answered[:-1] == ["retry:transient"] * (settings.GEO_MAX_SUBMIT_ATTEMPTS - 1)


def test_fetched_evidence_completes_the_collection_and_is_analysed(upstream: Any) -> None:
    upstream(asynchronous=True, fetch_evidence=_result(warnings=["SCREENSHOT_UNAVAILABLE"]))

    outcome, sample = _step(_accepted(), Step.EVIDENCE)

    assert outcome == "evidence-stored"
    assert (sample.collection_state, sample.evidence_state) == ("completed", "partial")
    assert sample.evidence_reason == "SCREENSHOT_UNAVAILABLE"
    assert (sample.analysis_state, sample.step, sample.queue_state) == ("accepted", "none", "done")


def test_fetched_evidence_goes_to_the_analysis_queue_when_inline_analysis_is_off(
    upstream: Any, settings: Any
) -> None:
    settings.GEO_ANALYSE_INLINE = False
    upstream(asynchronous=True, fetch_evidence=_result())

    _, sample = _step(_accepted(), Step.EVIDENCE)

    assert (sample.collection_state, sample.analysis_state) == ("completed", "pending")
    assert (sample.step, sample.queue_state) == (Step.ANALYSE, "ready")


def test_an_analysis_that_fails_ahead_leaves_the_answer_to_the_analysis_step(
    upstream: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(**kwargs: Any) -> None:
        raise RuntimeError("analyser bug")

    monkeypatch.setattr(step_context, "analyse_ahead", broken)
    upstream(submit=SubmitOutcome(upstream_id="resp-1", result=_result()))

    outcome, sample = _step(_sample())

    # The answer is kept and never asked again; its analysis is a step of its own.
    assert outcome == "answered"
    assert (sample.collection_state, sample.step, sample.queue_state) == (
        "completed",
        Step.ANALYSE,
        "ready",
    )
    monkeypatch.undo()
    outcome, sample = _step(sample)
    assert (outcome, sample.analysis_state) == ("analysed:accepted", "accepted")


def test_a_local_analyser_is_what_makes_analysis_inline(upstream: Any) -> None:
    upstream(submit=SubmitOutcome(upstream_id="resp-1", result=_result()))
    sample = _sample()
    AnalysisRevision.objects.create(
        run_id=sample.run_id, number=1, analyser="llm_judge", analyser_version="test"
    )

    outcome, sample = _step(sample)

    assert outcome == "answered"
    assert (sample.step, sample.analysis_state) == (Step.ANALYSE, "pending")


def test_a_failed_provider_task_ends_the_sample_with_its_message(upstream: Any) -> None:
    failed = _result(
        "", state="failed", error={"class": "upstream_failed", "message": "crawler died"}
    )
    upstream(asynchronous=True, fetch_evidence=failed)

    outcome, sample = _step(_accepted(), Step.EVIDENCE)

    assert outcome == "evidence-stored"
    assert (sample.collection_state, sample.queue_state) == ("failed", "done")
    assert sample.failure_reason == "crawler died"


def test_an_evidence_fetch_failure_is_retried_then_given_up(upstream: Any) -> None:
    upstream(asynchronous=True, fetch_evidence=UpstreamError(ErrorClass.TRANSIENT, "500"))
    sample = _accepted()

    first, after_first = _step(sample, Step.EVIDENCE)
    last, after_last = _step(sample, Step.EVIDENCE, claims=settings.GEO_MAX_STEP_CLAIMS - 1)

    assert (first, after_first.step) == ("retry-later:evidence", "evidence")
    assert (last, after_last.collection_state) == ("failed", "failed")


# --- analysis -------------------------------------------------------------------------------------


def _answered(upstream: Any, text: str) -> Sample:
    """An answer collected and waiting for its analysis step (inline analysis off)."""
    upstream(submit=SubmitOutcome(upstream_id="resp-1", result=_result(text)))
    with override_settings(GEO_ANALYSE_INLINE=False):
        _, sample = _step(_sample())
    return sample


def test_analysis_of_a_valid_answer_accepts_it_and_ends_the_sample(upstream: Any) -> None:
    sample = _answered(upstream, ANSWER)

    outcome, sample = _step(sample)

    assert outcome == "analysed:accepted"
    assert (sample.validity, sample.queue_state, sample.step) == ("valid", "done", "none")


def test_analysis_of_a_login_page_marks_it_invalid(upstream: Any) -> None:
    sample = _answered(upstream, "Please log in to continue.")

    outcome, sample = _step(sample)

    assert outcome == "analysed:failed"
    assert sample.validity == "invalid"
    assert sample.validity_reason


# --- lease checked on completion ----------------------------------------------------------------


def test_a_writer_whose_lease_ran_out_is_refused_even_before_the_sweep(upstream: Any) -> None:
    sample = _sample()

    def slow(request: SampleRequest, *, attempt_no: int = 1) -> SubmitOutcome:
        # The worker stalled past its lease; nobody swept or claimed the sample yet.
        Sample.objects.filter(pk=sample.pk).update(lease_until=Now() - timedelta(seconds=1))
        return SubmitOutcome(upstream_id="resp-1", result=_result())

    scripted = upstream()
    scripted.submit = slow  # type: ignore[method-assign]

    outcome, after = _step(sample)

    assert outcome == "stale-write-refused"
    refused = StaleWrite.objects.get(sample=sample)
    assert (refused.reason, refused.operation) == ("lease_expired", "answer")
    assert refused.presented_token == refused.current_token == after.fencing_token
    assert (after.collection_state, after.queue_state) == ("queued", "leased")
    assert not Capture.objects.filter(sample=sample, collection_state="completed").exists()


def test_an_expired_lease_is_never_renewed() -> None:
    sample = _sample()
    claim = _claim(sample)
    assert renew_lease(sample_id=sample.pk, token=claim.token, lease_seconds=60)
    Sample.objects.filter(pk=sample.pk).update(lease_until=Now() - timedelta(seconds=1))

    assert not renew_lease(sample_id=sample.pk, token=claim.token, lease_seconds=60)


# --- parse failures go to a person ----------------------------------------------------------------


def _unparsed() -> NormalizedResult:
    return _result(
        "",
        state="failed",
        error={
            "class": "parse_failed",
            "message": "not a Responses body (content-type 'text/html')",
        },
    )


def test_an_answer_the_parser_does_not_understand_goes_to_analyst_review(upstream: Any) -> None:
    scripted = upstream(submit=SubmitOutcome(upstream_id="up-1", result=_unparsed()))
    sample = _sample()

    outcome, sample = _step(sample)

    assert outcome == "parse-failed:review"
    assert (sample.submission_state, sample.collection_state) == ("accepted", "completed")
    assert (sample.evidence_state, sample.analysis_state) == ("partial", "review")
    assert sample.analysis_reason == (
        "parse_failed: not a Responses body (content-type 'text/html')"
    )
    assert (sample.step, sample.queue_state) == ("none", "done")
    assert Capture.objects.get(sample=sample).evidence_objects.filter(kind="raw").exists()
    assert Attempt.objects.get(sample=sample).status == AttemptStatus.ACCEPTED
    assert scripted.calls == ["submit"]  # never asked again
    finish_run_if_done(run_id=sample.run_id)  # on commit, which this test's transaction lacks
    on_run_finished(run_id=sample.run_id)
    # No usable answer: its share is released when the run ends, like a failed sample's.
    assert SampleSettlement.objects.get(sample=sample).reason == "failed"
    assert [v.message for v in check_all(sample.run_id)] == []


def test_a_provider_result_the_parser_does_not_understand_goes_to_review(upstream: Any) -> None:
    upstream(asynchronous=True, fetch_evidence=_unparsed())

    outcome, sample = _step(_accepted(), Step.EVIDENCE)

    assert outcome == "parse-failed:review"
    assert (sample.collection_state, sample.analysis_state) == ("completed", "review")
    assert sample.analysis_reason.startswith("parse_failed: ")


def test_an_unparsed_answer_cannot_be_accepted_by_the_analyst_only_rejected(upstream: Any) -> None:
    upstream(submit=SubmitOutcome(upstream_id="resp-1", result=_unparsed()))
    _, sample = _step(_sample())

    with pytest.raises(ReviewNotAllowed, match="could not be parsed"):
        decide_review(sample_id=sample.pk, decision="accepted", reviewer_id=None)
    decide_review(sample_id=sample.pk, decision="rejected", reviewer_id=None)

    assert Sample.objects.get(pk=sample.pk).analysis_state == "failed"


# --- Retry-After inside the budget ----------------------------------------------------------------


def test_a_retry_hint_longer_than_the_per_attempt_cap_schedules_the_sample_later(
    upstream: Any,
) -> None:
    upstream(submit=UpstreamError(ErrorClass.RATE_LIMITED, "slow down", retry_after=120.0))

    outcome, sample = _step(_sample())

    assert outcome == "retry:rate_limited"
    assert (sample.step, sample.queue_state) == ("submit", "ready")
    waits = Sample.objects.filter(pk=sample.pk, due_at__gte=Now() + timedelta(seconds=115))
    assert waits.exists()  # waits in the database, not in a worker


def test_a_retry_hint_past_the_total_budget_gives_up_with_that_reason(upstream: Any) -> None:
    upstream(submit=UpstreamError(ErrorClass.RATE_LIMITED, "slow down", retry_after=120.0))
    sample = _sample()
    Attempt.objects.create(
        sample=sample,
        attempt_no=1,
        idempotency_key="first",
        fencing_token=0,
        status=AttemptStatus.FAILED,
        started_at=Now() - timedelta(seconds=850),
    )
    Sample.objects.filter(pk=sample.pk).update(attempts=1)

    outcome, sample = _step(sample)

    assert outcome == "failed:rate_limited"
    assert "past the retry budget" in sample.failure_reason


# --- frozen model ---------------------------------------------------------------------------------


def test_a_run_keeps_the_model_it_was_launched_with(upstream: Any, settings: Any) -> None:
    settings.GEO_PLATFORMS = platform_settings({"GEO_OPENAI_MODEL": "model-at-launch"})
    sample = _sample()
    settings.GEO_PLATFORMS = platform_settings({"GEO_OPENAI_MODEL": "model-changed-later"})
    asked: list[str | None] = []

    def submit(request: SampleRequest, *, attempt_no: int = 1) -> SubmitOutcome:
        asked.append(request.model)
        return SubmitOutcome(upstream_id="up-1", result=_result())

    upstream().submit = submit

    _step(sample)

    assert sample.run.config_snapshot["models"] == {"openai": "model-at-launch"}
    assert asked == ["model-at-launch"]
    assert Attempt.objects.get(sample=sample).model == "model-at-launch"


# --- every attempt has a cost ---------------------------------------------------------------------

USAGE = b'{"usage": {"prompt_tokens": 1000000, "completion_tokens": 500000}}'


def test_every_attempt_records_its_tokens_and_cost_in_the_ledger(
    upstream: Any, settings: Any
) -> None:
    settings.GEO_MODEL_PRICES = {"priced-model": {"currency": "USD", "input": 40, "output": 160}}
    sample = _sample()
    Run.objects.filter(pk=sample.run_id).update(config_snapshot={
        **sample.run.config_snapshot, "models": {"openai": "priced-model"}
    })  # fmt: skip
    truncated = _result("For a small", state="truncated", error={"class": "truncated"})
    truncated.raw = USAGE
    scripted = upstream(submit=SubmitOutcome(upstream_id="resp-1", result=truncated))
    _step(sample)  # a truncated answer: retried, but its tokens were spent
    answered = _result()
    answered.raw = USAGE
    scripted.script["submit"] = SubmitOutcome(upstream_id="resp-2", result=answered)
    _step(sample)

    attempts = list(Attempt.objects.filter(sample=sample).order_by("attempt_no"))
    assert [(a.input_tokens, a.output_tokens, a.cost) for a in attempts] == [
        (1000000, 500000, 40 + 80),
        (1000000, 500000, 120),
    ]
    assert {a.cost_currency for a in attempts} == {"USD"}
    assert run_billing(run_id=sample.run_id).upstream_costs == {}  # queued for the dispatcher
    book_pending_attempt_costs()  # what its next tick does
    assert run_billing(run_id=sample.run_id).upstream_costs == {"USD": 240}
    recorded = {r.upstream_id: r.recorded_cost for r in reconcile(run_id=sample.run_id).rows}
    assert recorded == {"resp-1": 120, "resp-2": 120}  # each attempt, by its upstream id


def test_a_model_without_a_price_keeps_its_tokens_and_books_nothing(
    upstream: Any, settings: Any
) -> None:
    settings.GEO_MODEL_PRICES = {}
    answered = _result()
    answered.raw = USAGE
    upstream(submit=SubmitOutcome(upstream_id="resp-1", result=answered))

    _, sample = _step(_sample())

    attempt = Attempt.objects.get(sample=sample)
    assert (attempt.input_tokens, attempt.cost) == (1000000, None)
    assert run_billing(run_id=sample.run_id).upstream_costs == {}


# --- late evidence repair -------------------------------------------------------------------------


def _finished_without_screenshot(upstream: Any) -> Sample:
    scripted = upstream(
        asynchronous=True, fetch_evidence=_result(warnings=["SCREENSHOT_UNAVAILABLE"])
    )
    sample = _accepted()
    Run.objects.filter(pk=sample.run_id).update(config_snapshot={
        **sample.run.config_snapshot, "screenshot_policy": "optional"
    })  # fmt: skip
    _, sample = _step(sample, Step.EVIDENCE)  # collected and analysed
    assert (sample.queue_state, sample.evidence_state) == ("done", "partial")
    scripted.script["fetch_evidence"] = _result(
        attachments=[
            Attachment(kind="screenshot", content=screenshot_png("desktop"), mime="image/png")
        ]
    )
    return sample


def test_repair_evidence_stores_a_late_screenshot_without_touching_the_text(upstream: Any) -> None:
    sample = _finished_without_screenshot(upstream)
    before = list(Capture.objects.filter(sample=sample).values())
    out = StringIO()

    call_command("repair_evidence", str(sample.run_id), stdout=out)

    assert json.loads(out.getvalue())["repaired"] == 1
    sample.refresh_from_db()
    assert sample.evidence_state == "stored"
    assert sample.evidence_reason.startswith("repaired (screenshot of revision 1)")
    assert list(Capture.objects.filter(sample=sample).values()) == before  # text untouched
    capture = Capture.objects.get(sample=sample)
    assert capture.evidence_objects.filter(kind="screenshot").count() == 1


def test_repair_evidence_reports_what_is_still_missing(upstream: Any) -> None:
    sample = _finished_without_screenshot(upstream)
    upstream(asynchronous=True, fetch_evidence=_result(warnings=["SCREENSHOT_UNAVAILABLE"]))

    report = repair_evidence(run_id=sample.run_id)

    assert report.as_dict()["still_missing"] == 1
    assert "still has no screenshot" in report.still_missing[sample.pk]
    assert Sample.objects.get(pk=sample.pk).evidence_state == "partial"


# --- batch submit ---------------------------------------------------------------------------------


def _claimed_collector_samples(n: int) -> list[tuple[int, int]]:
    data = make_campaign_data(
        questions=n,
        targets=[
            {"platform": "collector", "device": "desktop", "region": "us", "mode": "web_search"}
        ],
        repeats=1,
    )
    data["screenshot_policy"] = "none"
    run = launch_funded(data)
    held = []
    for sample in Sample.objects.filter(run=run).order_by("pk"):
        claim = _claim(sample)
        held.append((sample.pk, claim.token))
    return held


def test_a_batch_accepted_in_part_records_each_task_by_its_own_outcome(upstream: Any) -> None:
    scripted = upstream(asynchronous=True)
    sent: list[list[str]] = []

    def submit_batch(requests: list[SampleRequest], **kwargs: Any) -> list[Any]:
        sent.append([r.idempotency_key for r in requests])
        refused = UpstreamError(ErrorClass.UNSUPPORTED, "region_unavailable: no capacity")
        return [SubmitOutcome(upstream_id="task-1"), refused]

    scripted.submit_batch = submit_batch  # type: ignore[method-assign]
    held = _claimed_collector_samples(2)

    outcomes = execution.run_submit_batch(held=held, worker="test")

    (first, _), (second, _) = held
    assert outcomes == {first: "accepted", second: "failed:unsupported"}
    assert len(sent) == 1 and len(set(sent[0])) == 2  # one call, a key per task
    accepted, refused = Sample.objects.get(pk=first), Sample.objects.get(pk=second)
    assert (accepted.upstream_id, accepted.step) == ("task-1", "poll")
    assert (refused.collection_state, refused.queue_state) == ("failed", "done")
    assert Attempt.objects.get(sample=refused).error_class == "unsupported"


def test_a_batch_whose_answer_was_lost_makes_every_task_uncertain(upstream: Any) -> None:
    scripted = upstream(asynchronous=True)
    lost = UpstreamError(ErrorClass.ACCEPTANCE_UNKNOWN, "read timed out")

    def submit_batch(requests: list[SampleRequest], **kwargs: Any) -> list[Any]:
        raise lost

    scripted.submit_batch = submit_batch  # type: ignore[method-assign]
    held = _claimed_collector_samples(3)

    outcomes = execution.run_submit_batch(held=held, worker="test")

    assert set(outcomes.values()) == {"uncertain"}
    assert {s.step for s in Sample.objects.filter(pk__in=outcomes)} == {"verify"}
