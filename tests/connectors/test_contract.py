"""The contract every direct model API adapter keeps, against the simulator over real HTTP.

One row of `PLATFORMS` per platform (or surface) says how that platform shows each behaviour:
which status a fault comes back with, which auth statuses it has, where its ids are, which
retry hint it sends, what a mid-stream error looks like. A new platform gets the whole contract
by adding a row; its own test module keeps only what is specific to its protocol.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests

from connectors.adapters.anthropic import AnthropicConnector
from connectors.adapters.deepseek import DeepSeekConnector
from connectors.adapters.doubao import DoubaoConnector
from connectors.adapters.gemini import GeminiConnector
from connectors.adapters.kimi import KimiConnector
from connectors.adapters.ollama import OllamaConnector
from connectors.adapters.openai_chat import OpenAIChatConnector
from connectors.adapters.openai_responses import OpenAIResponsesConnector
from connectors.adapters.perplexity import PerplexityConnector
from connectors.adapters.qwen import QwenConnector
from connectors.base import Connector, ErrorClass, NormalizedResult, SubmitOutcome, UpstreamError
from connectors.errors import request_id_from
from connectors.retry import REVIEW, VERIFY
from connectors.simulator import SimulatorHandle

from .conftest import connector_factory, sample
from .contract import POLICY, cite_everything, comparable

T, RATE, AUTH, INVALID = (
    ErrorClass.TRANSIENT,
    ErrorClass.RATE_LIMITED,
    ErrorClass.AUTH,
    ErrorClass.INVALID,
)
QUESTIONS = ["Which cloud provider is best for startups?", "哪家云服务最适合初创公司？"]
BAD_KEY = "invalid-key-xyz"


@dataclass(frozen=True)
class MidStream:
    """One way the platform fails after the 200: the fault's params and what must follow."""

    params: dict[str, Any]
    error_class: ErrorClass
    raw: bytes  # how the failure reads in the transcript
    code: str | None = None  # the upstream's code, when the platform sends one
    message: str = ""  # part of the error message
    http_status: int | None = None  # the status a DashScope error event carries


DEFAULT_MIDSTREAM = (MidStream({}, T, b'data: {"error"'),)


@dataclass(frozen=True)
class Platform:
    name: str  # the simulator's platform key
    cls: type[Connector]
    config: dict[str, Any]  # api_key, model, extra
    target: dict[str, str] = field(default_factory=dict)  # sample(): region, mode
    id: str = ""  # the test id when one platform has two surfaces
    upstream_id: str = ".+"  # regex
    request_id: str | None = ".+"  # regex; None: the API sends no request id
    error_request_id: str | None = ".+"  # the same, on an error response
    stream_start: bytes = b"data: "  # how a captured transcript begins
    stream_end: bytes = b""  # how a complete one ends
    done: tuple[bytes, ...] = (b"[DONE]",)  # only a complete transcript holds these
    partial_text: bool = True  # a cut stream keeps the text that arrived
    envelope: tuple[str, ...] = ("status_code",)  # fields a re-parse cannot know
    server_errors: dict[str, tuple[int, ErrorClass]] = field(
        default_factory=lambda: {"server_error": (500, T), "overloaded": (503, T)}
    )
    auth_statuses: tuple[int, ...] = (401, 403)  # the scripted auth_error fault's statuses
    bad_key_status: int = 401
    bad_key_message: str = ""  # part of the message an invalid key gets
    retry_hints: tuple[tuple[float | None, float | None], ...] = ((None, None),)  # sent, read
    rate_limit_raw: bytes = b""  # part of a 429's body
    midstream: tuple[MidStream, ...] = DEFAULT_MIDSTREAM
    login_fault: str = "login_page"
    login_raw: bytes = b"<!DOCTYPE html>"
    citations: str = "spans"  # "spans" | "unanchored" | "none" | "own" (the platform's tests)
    titles: bool = True  # citation titles are the source's title
    warnings: tuple[str, ...] = ()  # on a plain cited answer
    # How to ask for one non-streaming JSON body: path, headers, request body changes.
    plain: tuple[str, dict[str, str], dict[str, Any]] | None = None
    skip: frozenset[str] = frozenset()  # contract tests that do not apply

    def __str__(self) -> str:
        return self.id or self.name

    def connector(self, simulator: SimulatorHandle, **overrides: Any) -> Any:
        return connector_factory(self.cls, simulator, self.name, **self.config)(**overrides)

    def submit(
        self,
        simulator: SimulatorHandle,
        question: str,
        *,
        attempt_no: int = 1,
        mode: str | None = None,
        **overrides: Any,
    ) -> SubmitOutcome:
        request = sample(question, **self.target | ({"mode": mode} if mode else {}))
        return self.connector(simulator, **overrides).submit(request, attempt_no=attempt_no)

    def answer(self, simulator: SimulatorHandle, question: str, **overrides: Any) -> Any:
        outcome = self.submit(simulator, question, **overrides)
        assert outcome.result is not None
        return outcome.result

    def failure(self, simulator: SimulatorHandle, question: str, **overrides: Any) -> Any:
        with pytest.raises(UpstreamError) as caught:
            self.submit(simulator, question, **overrides)
        return caught.value

    def intended(self, simulator: SimulatorHandle) -> dict[str, Any]:
        return simulator.answers(self.name)[-1]


def _responses_midstream(code: str, error_class: ErrorClass) -> tuple[MidStream, ...]:
    return (
        MidStream({"variant": "error"}, error_class, b"event: error", code),
        MidStream({"variant": "response.failed"}, error_class, b"event: response.failed", code),
    )


def _coded(raw: bytes, *cases: tuple[str, ErrorClass]) -> tuple[MidStream, ...]:
    return tuple(MidStream({"code": code}, cls, raw, code) for code, cls in cases)


BEARER = {"Authorization": "Bearer k"}
NO_STREAM = {"stream": False}
BOT = {"bot_id": "bot-20261111-test"}
DOUBAO = {"api_key": "ark-test-secret-789", "model": "doubao-test"}
DOUBAO_RESPONSES_ERRORS = (
    MidStream({"variant": "error", "code": "InternalServiceError"}, T, b"event: error",
              "InternalServiceError"),
    MidStream({"variant": "response.failed", "code": "RateLimitExceeded.EndpointTPMExceeded"},
              RATE, b"event: response.failed", "RateLimitExceeded.EndpointTPMExceeded"),
    MidStream({"variant": "error", "code": "OutputTextRiskDetection"}, ErrorClass.UPSTREAM_FAILED,
              b"event: error", "OutputTextRiskDetection"),
)  # fmt: skip
QWEN_ERRORS = tuple(
    MidStream({"status": status, "code": code}, cls,
              f"event:error\n:HTTP_STATUS/{status}\n".encode(), code, http_status=status)
    for status, code, cls in [
        (500, "InternalError", T),
        (429, "Throttling.RateQuota", RATE),
        (400, "DataInspectionFailed", INVALID),  # an unknown code: the status decides
    ]
)  # fmt: skip

PLATFORMS = [
    Platform(
        "anthropic", AnthropicConnector,
        {"api_key": "sk-ant-test-secret-789", "model": "claude-test"},
        upstream_id="msg_.+", request_id="req_.+", error_request_id="req_.+",
        stream_start=b"event: message_start",
        plain=("/v1/messages", {"x-api-key": "k", "anthropic-version": "2023-06-01"}, NO_STREAM),
        done=(b"message_stop",), envelope=("status_code", "request_id"),
        server_errors={"server_error": (500, T), "overloaded": (529, T)},
        retry_hints=((3, 3.0),),  # the `retry-after` header
        midstream=_coded(b"event: error", ("overloaded_error", T), ("api_error", T),
                         ("rate_limit_error", RATE), ("invalid_request_error", INVALID)),
    ),
    Platform(
        "openai", OpenAIResponsesConnector, {"api_key": "sk-test-secret-123", "model": "gpt-test"},
        upstream_id="resp_.+", request_id="req_.+", error_request_id="req_.+",
        stream_start=b"event: response.created", plain=("/v1/responses", BEARER, NO_STREAM),
        done=(b"response.completed",), envelope=("status_code", "request_id"),
        auth_statuses=(401,),
        retry_hints=((1.5, 1.5),),  # retry-after-ms, more precise than retry-after: 2
        midstream=_responses_midstream("server_error", T),
    ),
    Platform(
        "openai_chat", OpenAIChatConnector,
        {"api_key": "sk-chat-secret-789", "model": "gpt-4o-mini-search-preview"},
        upstream_id="chatcmpl-.+", request_id="req_.+", error_request_id="req_.+",
        stream_end=b"data: [DONE]", envelope=("status_code", "request_id"),
        auth_statuses=(401,), retry_hints=((1.5, 1.5),),  # retry-after-ms wins
        skip=frozenset({"no_search"}),  # a search model only searches
    ),
    Platform(
        "deepseek", DeepSeekConnector,
        {"api_key": "sk-deepseek-secret-321", "model": "deepseek-chat"},
        target={"mode": "no_search"}, stream_start=b": keep-alive\n\n: keep-alive\n\n",
        stream_end=b"data: [DONE]",
        envelope=("status_code", "request_id"),
        auth_statuses=(401, 402),  # 402: insufficient balance
        bad_key_message="Authentication Fails", citations="none",
    ),
    Platform(
        "kimi", KimiConnector, {"api_key": "sk-kimi-secret-654", "model": "kimi-k2.6"},
        stream_start=b'{"object": "geo.kimi.rounds"', envelope=(), server_errors={
            "server_error": (500, T),
            "overloaded": (429, RATE),  # engine_overloaded_error, without a hint
        },
        auth_statuses=(401,), retry_hints=((1.5, 2.0),),  # Retry-After is whole seconds
        midstream=(MidStream({}, T, b'data: {\\"error\\"'),),  # a round's body, JSON-quoted
        login_raw=b'{"object": "geo.kimi.rounds"',  # the page is kept inside the rounds envelope
        partial_text=False,  # round 1 asks for the search: no text yet
        citations="own", warnings=("CITATIONS_FROM_TEXT", "WEB_SEARCH_ROUNDS_2"),
    ),
    Platform(
        "gemini", GeminiConnector,
        {"api_key": "AIza-gemini-test-secret-654", "model": "gemini-test"},
        target={"region": "global"}, error_request_id=None, done=(b"finishReason",),
        bad_key_status=400,  # API_KEY_INVALID
        plain=("/v1beta/models/gemini-test:generateContent", {"x-goog-api-key": "k"}, {}),
        retry_hints=((3, 3.0), (1.5, 1.5)), rate_limit_raw=b"RetryInfo",  # its retryDelay
        midstream=_coded(b'"error"', ("INTERNAL", T), ("UNAVAILABLE", T),
                         ("RESOURCE_EXHAUSTED", RATE), ("INVALID_ARGUMENT", INVALID)),
        titles=False,  # the source's domain, as Gemini sends
    ),
    Platform(
        "perplexity", PerplexityConnector, {"api_key": "pplx-test-secret-987", "model": "sonar"},
        request_id=None, error_request_id=None, stream_end=b"data: [DONE]",
        plain=("/chat/completions", BEARER, NO_STREAM),
        done=(b'"finish_reason": "stop"', b"[DONE]"),
        midstream=_coded(b"event: error", ("internal_server_error", T),
                         ("rate_limit_exceeded", RATE)),
    ),
    Platform(
        "doubao", DoubaoConnector, DOUBAO, target={"region": "cn"}, upstream_id="resp_.+",
        request_id="2026.+", error_request_id="2026.+", stream_start=b"event: response.created",
        done=(b"response.completed", b"[DONE]"), envelope=("status_code", "request_id"),
        midstream=DOUBAO_RESPONSES_ERRORS, citations="unanchored",
        plain=("/api/v3/responses", BEARER, NO_STREAM),
    ),
    Platform(
        "doubao", DoubaoConnector, DOUBAO | {"extra": BOT}, target={"region": "cn"},
        id="doubao_bots", request_id="2026.+", error_request_id="2026.+",
        done=(b"response.completed", b"[DONE]"),
        envelope=("status_code", "request_id"), citations="unanchored",
        plain=("/api/v3/bots/chat/completions", BEARER, NO_STREAM),
        skip=frozenset({"no_search"}),  # a bot's plugins are fixed: it always searches
    ),
    Platform(
        "qwen", QwenConnector, {"api_key": "sk-dashscope-secret-321", "model": "qwen-test"},
        target={"region": "cn"}, request_id=".{36}", error_request_id=".{36}",
        stream_start=b"id:1\nevent:result\n:HTTP_STATUS/200\ndata:",
        done=(b'"finish_reason":"stop"',), midstream=QWEN_ERRORS,
        plain=("/api/v1/services/aigc/text-generation/generation", BEARER, {}),  # no SSE header
        rate_limit_raw=b'"code": "Throttling.RateQuota"',
    ),
    Platform(
        "ollama", OllamaConnector, {"api_key": "", "model": "llama-test"},
        target={"mode": "no_search"}, upstream_id="noid:.+", request_id=None,
        error_request_id=None,
        stream_start=b'{"model"', done=(b'"done": true',),
        midstream=(MidStream({}, ErrorClass.UPSTREAM_FAILED, b'{"error"',
                             message="unexpected EOF"),),  # a bare string: nothing says retry
        login_fault="error_page", login_raw=b"Service temporarily unavailable",
        plain=("/api/chat", {}, NO_STREAM),
        citations="none",
    ),
]  # fmt: skip


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


@pytest.mark.parametrize("platform", rows("stall"))
def test_stream_stalling_after_the_cut_keeps_the_partial_transcript(
    simulator: SimulatorHandle, platform: Platform
) -> None:
    simulator.script({"match": "stall", "fault": "truncate", "params": {"stall_seconds": 3}})
    outcome = platform.submit(simulator, "stall mid stream", timeout_seconds=0.3)
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
    simulator.script({"match": "hang", "fault": "hang", "params": {"hang_seconds": 3}})
    error = platform.failure(simulator, "hang forever", timeout_seconds=0.3)
    assert error.error_class is ErrorClass.ACCEPTANCE_UNKNOWN and error.egress == "direct"
    assert POLICY.decide(error, attempt_no=1, elapsed_seconds=0).action == VERIFY
