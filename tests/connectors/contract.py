"""The connector contract's table and the helpers its tests share.

`PLATFORMS` has one row per direct model API platform (or surface): how that platform shows each
behaviour the contract checks (test_contract.py). The per-platform test modules build their
connectors from the same rows, so a platform's test configuration is written once.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from connectors import base
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
from connectors.base import ErrorClass, SampleRequest, UpstreamError
from connectors.retry import RetryPolicy
from simulator import SimulatorHandle

# The retry policy the contract tests judge classified errors by.
POLICY = RetryPolicy(max_attempts=3, base=0.5, max_delay=10, max_total_seconds=60)
# Every brand is mentioned and cited, so offset tests always have spans to check.
CITED_WORLD = [
    {"name": "Acme Cloud", "aliases": ["Acme"], "domains": ["acme.example"], "mention_rate": 1.0},
    {"name": "Globex", "aliases": ["环球"], "domains": ["globex.example"], "mention_rate": 1.0},
    {"name": "Initech", "domains": ["initech.example"], "mention_rate": 1.0},
]
CITED_PROFILE: dict[str, Any] = {"emoji_rate": 1.0, "citation_rate": 1.0}


def cite_everything(simulator: SimulatorHandle, **profile: Any) -> None:
    """Every brand mentioned and cited, with emoji, so offset tests always have spans."""
    simulator.configure(world=CITED_WORLD, profile=CITED_PROFILE | profile)


def comparable(result: base.NormalizedResult, *envelope: str) -> dict[str, Any]:
    """The JSON form without the capture time and the named HTTP-envelope fields."""
    data = result.as_dict()
    for name in ("captured_at", *envelope):
        data.pop(name)
    return data


def upstream_error(submit: Callable[[], Any]) -> UpstreamError:
    """The `UpstreamError` that `submit()` raises (it must raise one)."""
    with pytest.raises(UpstreamError) as caught:
        submit()
    return caught.value


def result_in(outcome: base.SubmitOutcome, state: str) -> base.NormalizedResult:
    """The outcome's result, which must be there and in collection state `state`."""
    assert outcome.result is not None and outcome.result.collection_state == state
    return outcome.result


def responses_json(upstream_id: str, status: str, **fields: Any) -> bytes:
    """A non-streaming Responses API body (OpenAI's and Doubao's share the shape)."""
    body = {"id": upstream_id, "object": "response", "status": status, "output": []}
    return json.dumps(body | fields).encode()


def sample(
    question: str,
    *,
    key: str | None = None,
    sample_id: int = 1,
    device: str = "desktop",
    region: str = "us",
    mode: str = "web_search",
    screenshot: bool = False,
) -> SampleRequest:
    return SampleRequest(
        sample_id=sample_id,
        idempotency_key=key or f"key-{sample_id}-{question}",
        question=question,
        device=device,
        region=region,
        mode=mode,
        screenshot=screenshot,
    )


def connector_factory(
    cls: type[base.Connector], simulator: SimulatorHandle, platform: str, **defaults: Any
) -> Callable[..., Any]:
    """Builds `cls` pointed at the simulator's `platform`; keyword arguments override the
    configuration (`defaults`, then a 5 s timeout)."""

    def build(**overrides: Any) -> Any:
        settings: dict[str, Any] = {
            "platform": platform,
            "base_url": simulator.url(platform),
            "timeout_seconds": 5.0,
        }
        return cls(base.ConnectorConfig(**(settings | defaults | overrides)))

    return build


T, RATE, AUTH, INVALID = (
    ErrorClass.TRANSIENT,
    ErrorClass.RATE_LIMITED,
    ErrorClass.AUTH,
    ErrorClass.INVALID,
)
QUESTIONS = ["Which cloud provider is best for startups?", "哪家云服务最适合初创公司？"]


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
    cls: type[base.Connector]
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
    reasoning: bytes | None = None  # how deep-thinking reasoning reads in the transcript
    # How to ask for one non-streaming JSON body: path, headers, request body changes.
    plain: tuple[str, dict[str, str], dict[str, Any]] | None = None
    skip: frozenset[str] = frozenset()  # contract tests that do not apply

    def __str__(self) -> str:
        return self.id or self.name

    def factory(self, simulator: SimulatorHandle) -> Callable[..., Any]:
        """Builds this platform's connector against the simulator (keywords override)."""
        return connector_factory(self.cls, simulator, self.name, **self.config)

    def connector(self, simulator: SimulatorHandle, **overrides: Any) -> Any:
        return self.factory(simulator)(**overrides)

    def submit(
        self,
        simulator: SimulatorHandle,
        question: str,
        *,
        attempt_no: int = 1,
        mode: str | None = None,
        fault: dict[str, Any] | None = None,
        **overrides: Any,
    ) -> base.SubmitOutcome:
        """Submits `question`; `fault` is a simulator script entry to set up first."""
        if fault is not None:
            simulator.script(fault)
        request = sample(question, **self.target | ({"mode": mode} if mode else {}))
        return self.connector(simulator, **overrides).submit(request, attempt_no=attempt_no)

    def answer(self, simulator: SimulatorHandle, question: str, **overrides: Any) -> Any:
        outcome = self.submit(simulator, question, **overrides)
        assert outcome.result is not None
        return outcome.result

    def failure(self, simulator: SimulatorHandle, question: str, **overrides: Any) -> Any:
        return upstream_error(lambda: self.submit(simulator, question, **overrides))

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
        reasoning=b"thinking_delta",
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
        reasoning=b'"reasoning_content": "',
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
        reasoning=b"response.reasoning_summary_text.delta",
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
        done=(b'"finish_reason":"stop"',), midstream=QWEN_ERRORS, reasoning=b"reasoning_content",
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
BY_ID = {str(p): p for p in PLATFORMS}
