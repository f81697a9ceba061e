import random
from typing import Any

import pytest

from connectors.base import ErrorClass, UpstreamError
from connectors.retry import (
    FAIL,
    GAVE_UP_POLLING,
    POLL,
    REASK,
    RETRY,
    REVIEW,
    VERIFY,
    RateLimit,
    RateLimiter,
    RetryPolicy,
    TokenBucket,
)

POLICY = RetryPolicy(max_attempts=4, base=1.0, max_delay=10.0, max_total_seconds=60.0)


def decide(error: UpstreamError | ErrorClass, attempt_no: int = 1, elapsed: float = 0.0):
    return POLICY.decide(
        error, attempt_no=attempt_no, elapsed_seconds=elapsed, rng=random.Random(1)
    )


@pytest.mark.parametrize(
    "error_class",
    [ErrorClass.INVALID, ErrorClass.AUTH, ErrorClass.UNSUPPORTED, ErrorClass.UPSTREAM_FAILED],
)
def test_non_retryable_classes_never_retry(error_class: ErrorClass) -> None:
    decision = decide(error_class)
    assert not decision.retry
    assert decision.action == FAIL


def test_transient_backs_off_exponentially_with_bounded_jitter() -> None:
    delays = [decide(ErrorClass.TRANSIENT, attempt_no=n).delay_seconds for n in (1, 2, 3)]
    for n, delay in zip((1, 2, 3), delays, strict=True):
        exponential = min(POLICY.max_delay, POLICY.base * 2 ** (n - 1))
        assert exponential <= delay < exponential + POLICY.base
    assert all(decide(ErrorClass.TRANSIENT, attempt_no=n).action == RETRY for n in (1, 2, 3))


def test_backoff_is_capped_at_max_delay() -> None:
    policy = RetryPolicy(max_attempts=20, base=1.0, max_delay=10.0, max_total_seconds=1000)
    decision = policy.decide(
        ErrorClass.TRANSIENT, attempt_no=10, elapsed_seconds=0, rng=random.Random(0)
    )
    assert 10.0 <= decision.delay_seconds < 11.0


def test_attempts_are_bounded() -> None:
    assert decide(ErrorClass.TRANSIENT, attempt_no=3).retry
    assert not decide(ErrorClass.TRANSIENT, attempt_no=4).retry


def test_total_time_budget_is_bounded() -> None:
    decision = decide(ErrorClass.TRANSIENT, attempt_no=1, elapsed=59.5)
    assert not decision.retry
    assert "budget" in decision.reason


def test_rate_limited_waits_as_told() -> None:
    error = UpstreamError(ErrorClass.RATE_LIMITED, "slow down", retry_after=2.5)
    decision = decide(error)
    assert decision.retry
    assert 2.5 <= decision.delay_seconds <= 2.5 + 0.25


def test_rate_limited_hint_beyond_max_delay_waits_within_the_total_budget() -> None:
    error = UpstreamError(ErrorClass.RATE_LIMITED, "slow down", retry_after=30)
    decision = decide(error)
    assert decision.retry
    assert 30 <= decision.delay_seconds <= 31


def test_rate_limited_hint_beyond_total_budget_stops_retrying_with_that_reason() -> None:
    error = UpstreamError(ErrorClass.RATE_LIMITED, "slow down", retry_after=5)
    decision = decide(error, elapsed=58)
    assert not decision.retry
    assert "past the retry budget of 60s" in decision.reason


def test_rate_limited_without_hint_backs_off() -> None:
    decision = decide(ErrorClass.RATE_LIMITED, attempt_no=2)
    assert decision.retry
    assert 2.0 <= decision.delay_seconds < 3.0


def test_acceptance_unknown_asks_for_verification_not_a_retry() -> None:
    decision = decide(ErrorClass.ACCEPTANCE_UNKNOWN)
    assert not decision.retry
    assert decision.action == VERIFY
    assert decision.reason.startswith("verify")


def test_parse_failure_goes_to_review_and_is_never_re_asked() -> None:
    decision = decide(ErrorClass.PARSE_FAILED)
    assert (decision.retry, decision.action) == (False, REVIEW)


def test_failed_polls_keep_polling_until_the_task_deadline_however_many_failed() -> None:
    error = UpstreamError(ErrorClass.POLL_FAILED, "503")
    policy = RetryPolicy(max_step_claims=8, poll_deadline_seconds=600)
    again = policy.after_poll_error(error, age_seconds=100)
    assert (again.action, again.delay_seconds, again.counted) == (POLL, 10.0, False)
    given_up = policy.after_poll_error(error, age_seconds=600)
    assert given_up.action == FAIL
    assert given_up.reason.startswith(GAVE_UP_POLLING)


def test_an_unreachable_platform_never_ends_a_poll_even_past_the_deadline() -> None:
    error = UpstreamError(ErrorClass.UNREACHABLE, "not sent: connection refused")
    policy = RetryPolicy(poll_deadline_seconds=600)
    late = policy.after_poll_error(error, age_seconds=10_000)
    assert (late.action, late.counted) == (POLL, False)


def test_unreachable_attempts_do_not_count_against_the_attempt_budget() -> None:
    policy = RetryPolicy(max_attempts=3, max_total_seconds=900)
    unreachable = UpstreamError(ErrorClass.UNREACHABLE, "not sent: connection refused")
    # The tenth attempt, all of them unreachable: still retried, and not held as poison.
    tenth = policy.decide(unreachable, attempt_no=10, elapsed_seconds=60, unreachable_before=9)
    assert (tenth.action, tenth.counted) == (RETRY, False)
    transient = UpstreamError(ErrorClass.TRANSIENT, "503")
    # Two answerable attempts after eight unreachable ones: one more is allowed.
    second = policy.decide(transient, attempt_no=10, elapsed_seconds=60, unreachable_before=8)
    assert (second.action, second.counted) == (RETRY, True)
    third = policy.decide(transient, attempt_no=11, elapsed_seconds=60, unreachable_before=8)
    assert (third.action, third.reason) == (FAIL, "3 attempts used")
    # The total time budget still bounds an outage that never ends.
    over = policy.decide(unreachable, attempt_no=10, elapsed_seconds=899, unreachable_before=9)
    assert over.action == FAIL


def test_an_unreachable_platform_is_waited_out_by_fetches_and_lookups_without_counting() -> None:
    policy = RetryPolicy(max_step_claims=3)
    unreachable = UpstreamError(ErrorClass.UNREACHABLE, "not sent: connection refused")
    fetch = policy.after_evidence_error(unreachable, claims=3)
    lookup = policy.after_verify_error(unreachable)
    assert (fetch.action, fetch.counted) == (RETRY, False)
    assert (lookup.action, lookup.counted) == (RETRY, False)
    assert policy.after_verify_error(UpstreamError(ErrorClass.TRANSIENT, "503")).counted


def test_poll_interval_follows_the_hint_else_the_task_age_within_bounds() -> None:
    policy = RetryPolicy(poll_min_seconds=0.5, poll_max_seconds=30.0)
    assert policy.next_poll(age_seconds=1, hint=None).delay_seconds == 0.5
    assert policy.next_poll(age_seconds=100, hint=None).delay_seconds == 10.0
    assert policy.next_poll(age_seconds=10_000, hint=None).delay_seconds == 30.0
    assert policy.next_poll(age_seconds=10_000, hint=3.0).delay_seconds == 3.0
    assert policy.next_poll(age_seconds=1, hint=None).action == POLL


def test_an_evidence_fetch_is_retried_after_the_hint_or_a_pause_until_the_cap() -> None:
    policy = RetryPolicy(max_step_claims=3, evidence_delay_seconds=2.0)
    hinted = UpstreamError(ErrorClass.TRANSIENT, "503", retry_after=7.0)
    assert (policy.after_evidence_error(hinted, claims=1).action, 7.0) == (
        RETRY,
        policy.after_evidence_error(hinted, claims=1).delay_seconds,
    )
    plain = UpstreamError(ErrorClass.TRANSIENT, "503")
    assert policy.after_evidence_error(plain, claims=2).delay_seconds == 2.0
    assert policy.after_evidence_error(plain, claims=3).action == FAIL


def test_a_verify_lookup_that_cannot_work_goes_to_review_else_is_tried_again() -> None:
    policy = RetryPolicy(verify_delay_seconds=5.0)
    unsupported = policy.after_verify_error(UpstreamError(ErrorClass.UNSUPPORTED, "no lookup"))
    assert unsupported.action == REVIEW
    failed = policy.after_verify_error(UpstreamError(ErrorClass.TRANSIENT, "503"))
    assert (failed.action, failed.delay_seconds) == (RETRY, 5.0)


def test_an_uncertain_policy_waits_its_time_then_asks_again_instead_of_parking() -> None:
    policy = RetryPolicy(max_step_claims=3)
    cannot_tell = UpstreamError(ErrorClass.UNSUPPORTED, "no lookup")
    early = policy.after_verify_error(cannot_tell, reask_after=300, age_seconds=100)
    assert (early.action, early.delay_seconds, early.counted) == (RETRY, 200, False)
    due = policy.after_verify_error(cannot_tell, reask_after=300, age_seconds=300)
    assert due.action == REASK
    assert policy.after_verify_error(cannot_tell, age_seconds=10_000).action == REVIEW  # default


def test_a_step_that_raised_backs_off_exponentially_up_to_a_minute() -> None:
    policy = RetryPolicy(max_delay=60.0)
    delays = [policy.after_step_error(claims=n).delay_seconds for n in (1, 3, 10)]
    assert delays == [2.0, 8.0, 60.0]


def test_a_step_claimed_more_often_than_the_cap_is_poison() -> None:
    policy = RetryPolicy(max_step_claims=8)
    assert not policy.claimed_too_often(8)
    assert policy.claimed_too_often(9)


def test_x_should_retry_false_forces_no_retry() -> None:
    error = UpstreamError(ErrorClass.TRANSIENT, "x", status_code=500, should_retry=False)
    assert not decide(error).retry


def test_x_should_retry_true_forces_a_retry() -> None:
    error = UpstreamError(ErrorClass.INVALID, "x", status_code=400, should_retry=True)
    decision = decide(error)
    assert decision.retry
    assert decision.action == RETRY


def test_same_rng_seed_same_decision() -> None:
    assert decide(ErrorClass.TRANSIENT) == decide(ErrorClass.TRANSIENT)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_token_bucket_spends_and_refills() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=2.0, capacity=2.0, clock=clock)
    assert bucket.try_acquire() and bucket.try_acquire()
    assert not bucket.try_acquire()
    assert bucket.seconds_until_available() == pytest.approx(0.5)
    clock.now = 0.5
    assert bucket.try_acquire()


def test_rate_limiter_keeps_platforms_and_operations_apart() -> None:
    clock = FakeClock()
    limiter = RateLimiter(
        limits={("openai", "submit"): RateLimit(1.0, 1.0)},
        default=RateLimit(100.0, 5.0),
        clock=clock,
    )
    assert limiter.try_acquire("openai", "submit")
    assert not limiter.try_acquire("openai", "submit")
    assert limiter.try_acquire("openai", "poll")  # a different operation has its own budget
    assert limiter.try_acquire("gemini", "submit")  # so does a different platform
    assert limiter.wait_seconds("openai", "submit") == pytest.approx(1.0)
    with pytest.raises(ValueError):
        limiter.try_acquire("openai", "download")


def test_unconfigured_pairs_without_default_are_unlimited() -> None:
    limiter = RateLimiter()
    assert all(limiter.try_acquire("x", "screenshot") for _ in range(100))


# --- an answer already kept in the inbox -------------------------------------------------------


def test_an_evidence_store_outage_is_waited_out_past_the_poison_cap() -> None:
    outage = ConnectionRefusedError("store down")
    for claims, age in ((0, 0.0), (POLICY.max_step_claims + 5, 3600.0)):
        decision = POLICY.after_archive_error(outage, outage=True, claims=claims, age_seconds=age)
        assert decision.action == RETRY
        assert POLICY.evidence_delay_seconds <= decision.delay_seconds <= POLICY.max_delay


def test_an_archive_delay_grows_with_the_answers_age_during_an_outage() -> None:
    delays = [
        POLICY.after_archive_error(OSError(), outage=True, claims=0, age_seconds=age).delay_seconds
        for age in (0.0, 20.0, 30.0, 600.0)
    ]
    assert delays == sorted(delays) and delays[0] < delays[-1] == POLICY.max_delay


def test_an_archive_that_keeps_failing_is_parked_at_the_poison_cap_never_resubmitted() -> None:
    bug = ValueError("malformed attachment")
    early = POLICY.after_archive_error(bug, outage=False, claims=1, age_seconds=5.0)
    capped = POLICY.after_archive_error(
        bug, outage=False, claims=POLICY.max_step_claims, age_seconds=5.0
    )
    assert early.action == RETRY
    assert capped.action == REVIEW and "answer kept" in capped.reason


def test_a_database_failure_while_keeping_an_answer_is_retried_with_backoff_for_a_minute() -> None:
    policy = RetryPolicy()
    delays, elapsed, tries = [], 0.0, 0
    while True:
        tries += 1
        decision = policy.after_inbox_write_error(tries=tries, elapsed_seconds=elapsed)
        if not decision.retry:
            break
        delays.append(decision.delay_seconds)
        elapsed += decision.delay_seconds
    assert delays[:3] == [0.25, 0.5, 1.0] and max(delays) == 8.0
    assert policy.inbox_write_seconds - 8.0 <= elapsed <= policy.inbox_write_seconds
    assert decision.action == FAIL


def test_the_pipeline_keeps_an_answer_in_hand_for_as_long_as_the_steps_lease(
    settings: Any,
) -> None:
    # A database connection attempt may itself wait a minute (the pool's timeout): a policy
    # of one minute would give up on the first try of a one-minute outage.
    from pipeline.step_context import retry_policy

    settings.GEO_LEASE_SECONDS = 120
    policy = retry_policy()

    assert policy.after_inbox_write_error(tries=1, elapsed_seconds=60.5).retry
    assert not policy.after_inbox_write_error(tries=9, elapsed_seconds=115.0).retry
