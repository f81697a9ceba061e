"""The contract every direct model API adapter keeps, against the simulator over real HTTP.

The rows of `contract.PLATFORMS` say how each platform shows each behaviour: which status a
fault comes back with, which auth statuses it has, where its ids are, which retry hint it sends,
what a mid-stream error looks like. A new platform gets the whole contract by adding a row; its
own test module keeps only what is specific to its protocol.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Any

import pytest
import requests

from connectors.base import ErrorClass, NormalizedResult
from connectors.errors import request_id_from
from connectors.retry import REVIEW, VERIFY
from simulator import SimulatorHandle

from .contract import (
    PLATFORMS,
    POLICY,
    QUESTIONS,
    MidStream,
    Platform,
    cite_everything,
    comparable,
    sample,
)

BAD_KEY = "invalid-key-xyz"


def rows(test: str) -> list[Any]:
    return [pytest.param(p, id=str(p)) for p in PLATFORMS if test not in p.skip]


def cases(test: str, values: Callable[[Platform], Any]) -> list[Any]:
    """(platform, case) pairs: each platform's cases of one behaviour."""
    return [
        pytest.param(p, case, id=f"{p}-{number}")
        for p in PLATFORMS
        if test not in p.skip
        for number, case in enumerate(values(p))
    ]


def _matches(pattern: str | None, value: str | None) -> bool:
    return value is None if pattern is None else bool(value and re.fullmatch(pattern, value))


# --- answers ------------------------------------------------------------------------------------
@pytest.mark.parametrize("question", QUESTIONS)
@pytest.mark.parametrize("platform", rows("answer"))
def test_the_answer_is_the_intended_one_including_cjk_and_emoji(
    simulator: SimulatorHandle, platform: Platform, question: str
) -> None:
    cite_everything(simulator)
    result = platform.answer(simulator, question)
    intended = platform.intended(simulator)
    assert result.collection_state == "completed" and result.evidence_state == "stored"
    assert result.error is None and result.warnings == list(platform.warnings)
    assert result.answer_text == intended["answer_text"]
    assert any(ord(ch) > 0xFFFF for ch in result.answer_text)  # emoji outside the BMP
    if question.startswith("哪"):
        assert any("\u4e00" <= ch <= "\u9fff" for ch in result.answer_text)
    _check_citations(platform, result, intended["citations"])


def _check_citations(
    platform: Platform, result: NormalizedResult, expected: list[dict[str, Any]]
) -> None:
    if platform.citations == "own":
        return
    if platform.citations == "none":
        assert result.citations == []
        return
    anchored = [c for c in result.citations if c.start is not None]
    if platform.citations == "unanchored":
        assert anchored == []  # the API gives no offsets: none are invented
        anchored = result.citations
    assert len(anchored) == len(expected) >= 4
    for citation, source in zip(anchored, expected, strict=True):
        assert citation.url == source["url"]
        assert citation.title == source["title"] or not platform.titles
        if platform.citations == "spans":
            assert result.answer_text[citation.start : citation.end] == source["cited_text"]
    assert all("utm_" not in c.normalized_url for c in result.citations)
    assert [c.id for c in result.citations] == [
        f"c{n}" for n in range(1, len(result.citations) + 1)
    ]


@pytest.mark.parametrize("platform", rows("ids"))
def test_submit_records_ids_and_egress(simulator: SimulatorHandle, platform: Platform) -> None:
    outcome = platform.submit(simulator, "best crm")
    intended = platform.intended(simulator)
    assert outcome.upstream_id == intended["upstream_id"] or outcome.upstream_id == (
        "noid:key-1-best crm"  # no id at all: named after the idempotency key
    )
    assert _matches(platform.upstream_id, outcome.upstream_id)
    assert outcome.request_id == intended.get("request_id")
    assert _matches(platform.request_id, outcome.request_id)
    assert outcome.result is not None and outcome.result.request_id == outcome.request_id
    assert outcome.egress == "direct"
    assert outcome.result.sample_id == 1 and outcome.result.status_code == 200


@pytest.mark.parametrize("platform", rows("reparse"))
def test_reparse_of_the_captured_transcript_equals_the_live_result(
    simulator: SimulatorHandle, platform: Platform
) -> None:
    cite_everything(simulator)
    live = platform.answer(simulator, "emoji and offsets")
    assert live.raw.startswith(platform.stream_start)
    assert live.raw.rstrip().endswith(platform.stream_end)
    again = platform.cls.parse(live.raw, content_type=live.raw_mime, sample_id=1)
    assert comparable(again, *platform.envelope) == comparable(live, *platform.envelope)
    # No content type, as `reparse` of a stored file: the format is sniffed (the mime then
    # loses its charset).
    sniffed = platform.cls.parse(live.raw, sample_id=1)
    envelope = (*platform.envelope, "raw_mime")
    assert comparable(sniffed, *envelope) == comparable(live, *envelope)


@pytest.mark.parametrize("platform", [p for p in rows("plain") if p.values[0].plain])
def test_a_non_streaming_json_body_parses_the_same(
    simulator: SimulatorHandle, platform: Platform
) -> None:
    assert platform.plain is not None
    path, headers, changes = platform.plain
    cite_everything(simulator)
    body = platform.connector(simulator).request_body(sample("json please", **platform.target))
    response = requests.post(
        simulator.url(platform.name) + path, json=body | changes, headers=headers, timeout=5
    )
    assert response.headers["content-type"].startswith("application/json")
    result = platform.cls.parse(response.content, content_type=response.headers["content-type"])
    intended = platform.intended(simulator)
    assert result.collection_state == "completed" and result.error is None
    assert result.warnings == list(platform.warnings)
    assert result.upstream_id == intended["upstream_id"] or platform.upstream_id == "noid:.+"
    assert _matches(platform.request_id, request_id_from(response.headers) or result.request_id)
    assert result.answer_text == intended["answer_text"]
    _check_citations(platform, result, intended["citations"])


@pytest.mark.parametrize("platform", [p for p in rows("thinking") if p.values[0].reasoning])
def test_deep_thinking_reasoning_stays_in_the_transcript_not_the_answer(
    simulator: SimulatorHandle, platform: Platform
) -> None:
    result = platform.answer(simulator, "think hard", mode="deep_thinking")
    assert result.collection_state == "completed"
    assert platform.reasoning is not None and platform.reasoning in result.raw
    assert result.answer_text == platform.intended(simulator)["answer_text"]


@pytest.mark.parametrize("platform", rows("no_search"))
def test_no_search_answer_has_no_citations(simulator: SimulatorHandle, platform: Platform) -> None:
    cite_everything(simulator)
    result = platform.answer(simulator, "offline", mode="no_search")
    assert result.collection_state == "completed"
    assert result.citations == []
    assert result.answer_text == platform.intended(simulator)["answer_text"]


# --- faults after the 200 -----------------------------------------------------------------------
@pytest.mark.parametrize("platform", rows("truncate"))
def test_truncated_stream_is_truncated_not_a_short_answer(
    simulator: SimulatorHandle, platform: Platform
) -> None:
    simulator.script({"match": "cut me", "fault": "truncate"})
    outcome = platform.submit(simulator, "please cut me off")
    result = outcome.result
    assert result is not None
    assert result.collection_state == "truncated" and result.evidence_state == "partial"
    assert result.error is not None and result.error["class"] == "truncated"
    assert result.raw.startswith(platform.stream_start)  # what arrived is kept
    assert bool(result.answer_text) is platform.partial_text  # kept, but not an answer
    assert not any(marker in result.raw for marker in platform.done)
    assert _matches(platform.request_id, result.request_id)
    assert _matches(platform.upstream_id, outcome.upstream_id)  # known from the first frames


# Upstreams slower than the 0.3 s timeout the tests below give the connector.
STALL: dict[str, Any] = {"match": "stall", "fault": "truncate", "params": {"stall_seconds": 3}}
HANG: dict[str, Any] = {"match": "hang", "fault": "hang", "params": {"hang_seconds": 3}}


@pytest.mark.parametrize("platform", rows("stall"))
def test_stream_stalling_after_the_cut_keeps_the_partial_transcript(
    simulator: SimulatorHandle, platform: Platform
) -> None:
    outcome = platform.submit(simulator, "stall mid stream", timeout_seconds=0.3, fault=STALL)
    result = outcome.result
    assert result is not None and result.collection_state == "truncated"
    assert result.error is not None and result.error["class"] == "truncated"
    assert result.error["message"].startswith("stream cut")
    assert result.raw.startswith(platform.stream_start)
    assert _matches(platform.upstream_id, outcome.upstream_id)  # acceptance is known


@pytest.mark.parametrize(("platform", "case"), cases("midstream", lambda p: p.midstream))
def test_mid_stream_error_fails_with_a_classified_error(
    simulator: SimulatorHandle, platform: Platform, case: MidStream
) -> None:
    simulator.script({"match": "break", "fault": "midstream_error", "params": case.params})
    result = platform.answer(simulator, "break in the middle")
    assert result.collection_state == "failed" and result.evidence_state == "failed"
    assert result.error is not None
    assert result.error["class"] == case.error_class.value
    assert result.error.get("code") == case.code or case.code is None
    assert case.message in result.error["message"]
    assert result.error.get("http_status") == case.http_status or case.http_status is None
    assert case.raw in result.raw  # kept for review
    assert not any(marker in result.raw for marker in platform.done)


@pytest.mark.parametrize("platform", rows("login_page"))
def test_login_page_with_200_is_a_parse_failure_sent_to_review(
    simulator: SimulatorHandle, platform: Platform
) -> None:
    simulator.script({"match": "captcha", "fault": platform.login_fault})
    result = platform.answer(simulator, "captcha time")
    assert result.collection_state == "failed"
    assert result.error is not None and result.error["class"] == "parse_failed"
    assert result.raw.startswith(platform.login_raw)
    assert POLICY.decide(ErrorClass.PARSE_FAILED, attempt_no=1, elapsed_seconds=0).action == REVIEW


# --- HTTP errors --------------------------------------------------------------------------------
@pytest.mark.parametrize(("platform", "hint"), cases("rate_limit", lambda p: p.retry_hints))
def test_429_is_rate_limited_with_the_hint_and_the_retry_succeeds(
    simulator: SimulatorHandle, platform: Platform, hint: tuple[float | None, float | None]
) -> None:
    sent, read = hint
    params = {} if sent is None else {"retry_after_seconds": sent}
    simulator.script({"match": "busy", "fault": "rate_limit", "params": params})
    error = platform.failure(simulator, "busy hour")
    assert error.error_class is ErrorClass.RATE_LIMITED and error.status_code == 429
    assert error.retry_after == read
    assert _matches(platform.error_request_id, error.request_id)
    assert platform.rate_limit_raw in (error.raw or b"")
    decision = POLICY.decide(error, attempt_no=1, elapsed_seconds=0, rng=random.Random(0))
    assert decision.retry
    if read is None:
        assert 0.5 <= decision.delay_seconds <= 1.0  # the policy's backoff, with jitter
    else:
        assert decision.delay_seconds >= read
    retried = platform.submit(simulator, "busy hour", attempt_no=2)
    assert retried.result is not None and retried.result.collection_state == "completed"


@pytest.mark.parametrize(
    ("platform", "fault"), cases("server_error", lambda p: p.server_errors.items())
)
def test_5xx_and_overload_are_retried(
    simulator: SimulatorHandle, platform: Platform, fault: tuple[str, tuple[int, ErrorClass]]
) -> None:
    name, (status, error_class) = fault
    simulator.script({"match": "flaky", "fault": name})
    error = platform.failure(simulator, "flaky upstream")
    assert error.error_class is error_class and error.status_code == status
    assert POLICY.decide(error, attempt_no=1, elapsed_seconds=0).retry


@pytest.mark.parametrize(("platform", "status"), cases("auth", lambda p: p.auth_statuses))
def test_auth_errors_are_not_retried(
    simulator: SimulatorHandle, platform: Platform, status: int
) -> None:
    simulator.script({"match": "who", "fault": "auth_error", "params": {"status": status}})
    error = platform.failure(simulator, "who am i")
    assert error.error_class is ErrorClass.AUTH and error.status_code == status
    assert _matches(platform.error_request_id, error.request_id)
    assert not POLICY.decide(error, attempt_no=1, elapsed_seconds=0).retry


@pytest.mark.parametrize("platform", rows("bad_key"))
def test_an_invalid_key_is_auth_and_never_leaks(
    simulator: SimulatorHandle, platform: Platform
) -> None:
    error = platform.failure(simulator, "who am i", api_key=BAD_KEY)
    assert error.error_class is ErrorClass.AUTH and error.status_code == platform.bad_key_status
    assert platform.bad_key_message in error.message
    assert BAD_KEY not in str(error) and BAD_KEY.encode() not in (error.raw or b"")
    assert not POLICY.decide(error, attempt_no=1, elapsed_seconds=0).retry


@pytest.mark.parametrize("platform", rows("hang"))
def test_hang_past_the_timeout_is_acceptance_unknown(
    simulator: SimulatorHandle, platform: Platform
) -> None:
    error = platform.failure(simulator, "hang forever", timeout_seconds=0.3, fault=HANG)
    assert error.error_class is ErrorClass.ACCEPTANCE_UNKNOWN and error.egress == "direct"
    assert POLICY.decide(error, attempt_no=1, elapsed_seconds=0).action == VERIFY
