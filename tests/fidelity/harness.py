"""The conformance harness: each vendor's official SDK and our adapter read the same bytes.

One exchange per scenario: the SDK sends its own request to the simulator on loopback through a
recording transport, so the simulator must accept exactly what the SDK builds (the request
side), and the recorded response bytes are then replayed to our connector's `submit()` (the
live path: request building, error classification, request id, `parse()`). Any disagreement is
a bug in the simulator or the adapter, never a tolerance to widen here.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import requests
import urllib3
from requests.adapters import HTTPAdapter

from connectors.base import (
    Connector,
    ConnectorConfig,
    ErrorClass,
    NormalizedResult,
    SampleRequest,
    UpstreamError,
)
from connectors.registry import adapter_class
from connectors.transport import HttpTransport
from simulator import SimulatorHandle

API_KEY = "sk-fidelity-key"
HOP_BY_HOP = frozenset({"transfer-encoding", "content-length", "connection", "keep-alive"})


@dataclass(frozen=True)
class Scenario:
    """One simulator behaviour, as every platform's suite exercises it."""

    name: str
    question: str = "Which CRM is best for a small team?"
    mode: str = "web_search"
    region: str = "de"
    fault: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    long: bool = False

    @property
    def answers(self) -> bool:
        """Whether the simulator answers with a complete, valid response."""
        return self.fault is None


LONG_WORLD = {
    "brands": [
        {
            "name": f"Vendor{n:02d}",
            "aliases": [f"V{n:02d} Suite"],
            "domains": [f"vendor{n:02d}.example"],
            "mention_rate": 1.0,
        }
        for n in range(40)
    ]
}

SCENARIOS = [
    Scenario("plain", mode="no_search"),
    Scenario("web_search"),
    Scenario("cjk", question="哪个CRM最适合小团队？请比较艾克米和环球。", region="cn"),
    Scenario("long", long=True),
    Scenario("deep_thinking", mode="deep_thinking", region="jp"),
    Scenario("truncated", fault="truncate"),
    Scenario("midstream_error", fault="midstream_error"),
    Scenario("rate_limit", fault="rate_limit", params={"retry_after_seconds": 2.5}),
    Scenario("auth_failure", fault="auth_error"),
    Scenario("login_page", fault="login_page"),
    Scenario("provider_error", fault="server_error"),
]
SCENARIO_IDS = [s.name for s in SCENARIOS]
each_scenario = pytest.mark.parametrize("scenario", SCENARIOS, ids=SCENARIO_IDS)


def chat_request(model: str, scenario: Scenario) -> dict[str, Any]:
    """The request every chat-style SDK starts from: the model and the question as one user
    turn; each platform's suite adds its own options."""
    return {"model": model, "messages": [{"role": "user", "content": scenario.question}]}


def prepare(sim: SimulatorHandle, scenario: Scenario, platform: str) -> None:
    """Script the scenario's fault for its question on this platform, and its world."""
    sim.reset()
    sim.configure(
        seed=17,
        world=LONG_WORLD if scenario.long else None,
        profile={"citation_rate": 1.0, "cjk_rate": 0.0, "emoji_rate": 0.5},
    )
    if scenario.fault:
        sim.script(
            {
                "match": scenario.question,
                "fault": scenario.fault,
                "platform": platform,
                "params": scenario.params,
                "times": None,
            }
        )


@dataclass
class Exchange:
    """One HTTP exchange exactly as it crossed loopback."""

    method: str
    url: str
    request_headers: dict[str, str]
    request_body: bytes
    status: int
    headers: dict[str, str]
    body: bytes

    def request_json(self) -> Any:
        return json.loads(self.request_body) if self.request_body else None


class Recorder:
    """Keeps every exchange an httpx-based SDK makes, bytes as they crossed loopback."""

    def __init__(self) -> None:
        self.exchanges: list[Exchange] = []

    def record(self, request: Any, response: Any, body: bytes) -> list[tuple[str, str]]:
        headers = {k.lower(): v for k, v in response.headers.items()}
        self.exchanges.append(
            Exchange(
                request.method,
                str(request.url),
                {k.lower(): v for k, v in request.headers.items()},
                request.content,
                response.status_code,
                headers,
                body,
            )
        )
        return [(k, v) for k, v in headers.items() if k not in HOP_BY_HOP]

    def transport(self, httpx_module: Any = httpx) -> Any:
        """A transport for `httpx_module` (some SDKs vendor their own fork, e.g. `httpx2`)
        that forwards to the network and hands the SDK the recorded bytes."""
        recorder = self
        inner = httpx_module.HTTPTransport()

        class RecordingTransport(httpx_module.BaseTransport):  # type: ignore[misc, name-defined]
            def handle_request(self, request: Any) -> Any:
                request.read()
                response = inner.handle_request(request)
                body = response.read()
                response.close()
                kept = recorder.record(request, response, body)
                return httpx_module.Response(
                    response.status_code, headers=kept, content=body, request=request
                )

        return RecordingTransport()

    def client(self, httpx_module: Any = httpx) -> Any:
        return httpx_module.Client(transport=self.transport(httpx_module))


@contextmanager
def recording_requests(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Exchange]]:
    """Record what a `requests`-based SDK (DashScope) exchanges, bytes as received."""
    exchanges: list[Exchange] = []
    original = HTTPAdapter.send

    def send(self: HTTPAdapter, request: requests.PreparedRequest, **kwargs: Any) -> Any:
        response = original(self, request, **kwargs)
        body = response.raw.read(decode_content=True)
        headers = {k.lower(): v for k, v in response.headers.items()}
        body_sent = request.body or b""
        exchanges.append(
            Exchange(
                str(request.method),
                str(request.url),
                {k.lower(): str(v) for k, v in request.headers.items()},
                body_sent.encode() if isinstance(body_sent, str) else bytes(body_sent),
                response.status_code,
                headers,
                body,
            )
        )
        response.raw = io.BytesIO(body)
        return response

    with monkeypatch.context() as patch:
        patch.setattr(HTTPAdapter, "send", send)
        yield exchanges


class ReplayAdapter(HTTPAdapter):
    """Serves recorded exchanges, in order, to our connector's transport."""

    def __init__(self, exchanges: list[Exchange]) -> None:
        super().__init__()
        self.pending = list(exchanges)
        self.sent: list[requests.PreparedRequest] = []

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        self.sent.append(request)
        assert self.pending, f"our connector sent a request the SDK did not: {request.url}"
        exchange = self.pending.pop(0)
        raw = urllib3.HTTPResponse(
            body=io.BytesIO(exchange.body),
            headers=exchange.headers,
            status=exchange.status,
            preload_content=False,
            decode_content=False,
        )
        return self.build_response(request, raw)

    def sent_json(self, index: int = 0) -> Any:
        body = self.sent[index].body or b""
        return json.loads(body)


@dataclass
class OurView:
    """What our connector made of the replayed bytes."""

    result: NormalizedResult | None = None
    error: UpstreamError | None = None
    request_id: str | None = None
    adapter: ReplayAdapter | None = None

    def sent_json(self, index: int = 0) -> Any:
        assert self.adapter is not None
        return self.adapter.sent_json(index)

    @property
    def error_class(self) -> ErrorClass | None:
        if self.error is not None:
            return self.error.error_class
        if self.result is not None and self.result.error:
            return ErrorClass(self.result.error["class"])
        return None


@dataclass
class EventsView:
    """What an SDK with an event stream and a final object made of the exchange."""

    events: list[Any] = field(default_factory=list)
    final: Any = None
    error: Exception | None = None
    request_id: str | None = None


@dataclass
class ChunksView:
    """What an SDK streaming Chat Completions chunks made of the exchange."""

    chunks: list[Any] = field(default_factory=list)
    error: Exception | None = None

    def text(self) -> str:
        return "".join(c.choices[0].delta.content or "" for c in self.chunks if c.choices)

    def finish_reason(self) -> str | None:
        reasons = [c.choices[0].finish_reason for c in self.chunks if c.choices]
        return next((r for r in reversed(reasons) if r), None)


# An inline citation marker `[n]` in answer text (Perplexity, DashScope).
CITATION_MARKER = re.compile(r"\[(\d+)\]")


def connector_for(
    platform: str, base_url: str, *, model: str, extra: dict[str, Any] | None = None
) -> Connector:
    config = ConnectorConfig(
        platform=platform, base_url=base_url, api_key=API_KEY, model=model, extra=extra or {}
    )
    return adapter_class(platform)(config)


def replay(
    platform: str,
    sim: SimulatorHandle,
    scenario: Scenario,
    exchanges: list[Exchange],
    *,
    model: str,
) -> OurView:
    """Run our connector's live submit path over the recorded bytes."""
    connector = connector_for(platform, sim.url(platform), model=model)
    adapter = ReplayAdapter(exchanges)
    session = requests.Session()
    session.mount("http://", adapter)
    connector.transport = HttpTransport(connector.config, session=session)  # type: ignore[attr-defined]
    request = SampleRequest(
        sample_id=1,
        idempotency_key=f"fidelity-{scenario.name}",
        question=scenario.question,
        device="desktop",
        region=scenario.region,
        mode=scenario.mode,
        model=model,
    )
    view = OurView(adapter=adapter)
    try:
        outcome = connector.submit(request)
    except UpstreamError as error:
        view.error = error
        view.request_id = error.request_id
        return view
    view.result = outcome.result
    view.request_id = outcome.request_id
    assert not adapter.pending, "our connector left recorded responses unread"
    return view


def set_fields(body: dict[str, Any]) -> dict[str, Any]:
    """Some SDKs spell out every unset parameter (`"format": null`, `"tools": []`); the
    vendors read those as absent, so requests compare by what is set."""
    return {k: v for k, v in body.items() if v not in (None, [], {})}


@dataclass(frozen=True)
class Cited:
    """A citation as both sides can state it (None where a side does not expose it)."""

    url: str
    title: str | None = None
    start: int | None = None
    end: int | None = None


def our_citations(result: NormalizedResult, *, offsets: bool = True) -> list[Cited]:
    return [
        Cited(c.url, c.title, c.start if offsets else None, c.end if offsets else None)
        for c in result.citations
    ]


# What our classification must say for each scripted HTTP-level fault, and its status.
OUR_ERROR_CLASS = {
    "rate_limit": ErrorClass.RATE_LIMITED,
    "auth_error": ErrorClass.AUTH,
    "server_error": ErrorClass.TRANSIENT,
    "login_page": ErrorClass.PARSE_FAILED,
}
FAULT_STATUS = {"rate_limit": 429, "auth_error": 401, "server_error": 500}
# The faults an upstream refuses with (the login page: a 200 no SDK can read).
REFUSALS = ("rate_limit", "auth_error", "login_page", "server_error")


def client_options(
    base_url: str, recorder: Recorder, httpx_module: Any = httpx, *, strict: bool = False
) -> dict[str, Any]:
    """The keyword arguments of an httpx-based SDK client (OpenAI's, Anthropic's and their
    kin) that talks to `base_url` through `recorder`, never retrying on its own."""
    options: dict[str, Any] = {
        "api_key": API_KEY,
        "base_url": base_url,
        "http_client": recorder.client(httpx_module),
        "max_retries": 0,
    }
    if strict:
        options["_strict_response_validation"] = True
    return options


@contextmanager
def sdk_verdict(view: Any) -> Iterator[Any]:
    """Run an SDK call collecting into `view`; the SDK's own exception is its verdict, kept
    on `view.error` for the comparison rather than raised."""
    try:
        yield view
    except Exception as error:  # the SDK's own verdict is what we compare
        view.error = error


def _same(body: Any) -> Any:
    return body


class Trial:
    """One scenario on one platform: the simulator scripted for it, the SDK's exchange recorded
    on loopback, our connector's view of the same bytes, and the comparisons every platform's
    suite makes between the two."""

    def __init__(
        self, sim: SimulatorHandle, scenario: Scenario, platform: str, *, model: str
    ) -> None:
        prepare(sim, scenario, platform)
        self.sim, self.scenario, self.platform, self.model = sim, scenario, platform, model
        self.recorder = Recorder()
        self.exchanges = self.recorder.exchanges
        self.ours = OurView()

    @property
    def fault(self) -> str | None:
        return self.scenario.fault

    @property
    def refused(self) -> bool:
        """The upstream refused the request (a fault in `REFUSALS`)."""
        return self.fault in REFUSALS

    def client_options(
        self, httpx_module: Any = httpx, *, path: str = "", strict: bool = True
    ) -> dict[str, Any]:
        return client_options(
            self.sim.url(self.platform) + path, self.recorder, httpx_module, strict=strict
        )

    def replay(
        self,
        compare: Callable[[Any], Any] = _same,
        *,
        exchanges: list[Exchange] | None = None,
        rounds: bool = False,
    ) -> OurView:
        """Our connector reads the SDK's exchange (several with `rounds`) and sent, request
        for request, what the SDK sent (as `compare` sees the two bodies)."""
        exchanges = self.exchanges if exchanges is None else exchanges
        if not rounds:
            assert len(exchanges) == 1
        self.ours = replay(self.platform, self.sim, self.scenario, exchanges, model=self.model)
        if rounds:
            assert self.ours.adapter is not None and len(self.ours.adapter.sent) == len(exchanges)
        for index, exchange in enumerate(exchanges):
            assert compare(self.ours.sent_json(index)) == compare(exchange.request_json())
        return self.ours

    def assert_answered(
        self,
        sdk_error: Exception | None,
        text: str,
        cited: list[Cited] | None = None,
        *,
        offsets: bool = True,
        searched: bool | None = None,
    ) -> NormalizedResult:
        """The SDK parsed the answer; so did we, to the same text and (unless `cited` is None)
        the same citations. A search answer (`searched`, by default any mode but no_search)
        carries citations, or the comparison proves nothing."""
        assert sdk_error is None, f"the SDK rejected the simulator's answer: {sdk_error!r}"
        result = assert_answered(self.ours)
        assert text == result.answer_text
        if cited is not None:
            assert cited == our_citations(result, offsets=offsets)
        if searched is None:
            searched = self.scenario.mode != "no_search"
        if searched:
            assert result.citations, "a search answer with no citations proves nothing"
        return result

    def assert_truncated(self, sdk_text: str) -> None:
        assert_truncated(self.ours, sdk_text)

    def assert_quietly_truncated(
        self, sdk_error: Exception | None, finish_reason: Any, sdk_text: str
    ) -> None:
        """The SDK ends a stream cut before its terminator quietly, with no finish reason;
        we say truncated, with the text both read."""
        assert sdk_error is None and finish_reason is None
        assert_truncated(self.ours, sdk_text)

    def assert_failed_midstream(
        self,
        sdk_error: Exception | None = None,
        sdk_class: type | None = None,
        *,
        transient: bool = True,
        **error: Any,
    ) -> None:
        """An error event mid-stream: the SDK raised `sdk_class` (where given), the collection
        failed, carrying the upstream's `error` fields (code, message) as the SDK read them."""
        if sdk_class is not None:
            assert isinstance(sdk_error, sdk_class), sdk_error
        result = self.ours.result
        assert result is not None and result.collection_state == "failed"
        for key, value in error.items():
            assert result.error is not None and result.error[key] == value
        if transient:
            assert self.ours.error_class is ErrorClass.TRANSIENT

    def assert_rate_limited(self, hint: float | None) -> None:
        """Rate limited, waiting as long as the SDK would (`hint`, from its own parser)."""
        assert self.ours.error_class is ErrorClass.RATE_LIMITED
        assert self.ours.error is not None and self.ours.error.retry_after == hint

    def assert_refused(self, sdk_error: Exception | None, sdk_class: type) -> None:
        assert_refusal(str(self.fault), sdk_error, sdk_class, self.ours)

    def assert_stainless_refusal(
        self, sdk_module: Any, client: Any, sdk_error: Any, sdk_saw_no_answer: bool
    ) -> None:
        """A fault in `REFUSALS` as an SDK generated by Stainless (`sdk_module`: openai,
        perplexity) reports it: its own error class for each, the wait its `client` parses."""
        if self.fault == "rate_limit":
            assert isinstance(sdk_error, sdk_module.RateLimitError), sdk_error
            self.assert_rate_limited(client._parse_retry_after_header(sdk_error.response.headers))
        elif self.fault == "login_page":
            self.assert_login_page(sdk_saw_no_answer)
        else:
            classes = {
                "auth_error": sdk_module.AuthenticationError,
                "server_error": sdk_module.InternalServerError,
            }
            self.assert_refused(sdk_error, classes[str(self.fault)])

    def assert_refused_with(self, status: int, message: str) -> None:
        """For SDKs that report a refusal as a status and a message rather than a class."""
        assert status == FAULT_STATUS[str(self.fault)]
        assert self.ours.error_class is OUR_ERROR_CLASS[str(self.fault)]
        assert self.ours.error is not None and self.ours.error.message == message

    def assert_login_page(self, sdk_saw_no_answer: bool) -> None:
        """An HTML page with status 200: the SDK gets no answer out of it; we say unparseable."""
        assert sdk_saw_no_answer
        assert self.ours.error_class is ErrorClass.PARSE_FAILED


def assert_refusal(fault: str, sdk_error: Exception | None, sdk_class: type, ours: OurView) -> None:
    """The SDK raises the class its authors intend for this fault; we classify it alike."""
    assert isinstance(sdk_error, sdk_class), sdk_error
    assert ours.error_class is OUR_ERROR_CLASS[fault]


def assert_truncated(ours: OurView, sdk_text: str) -> None:
    """A stream cut before its terminator: truncated on our side, with the text both read."""
    assert ours.result is not None and ours.result.collection_state == "truncated"
    assert ours.result.answer_text == sdk_text


def assert_answered(ours: OurView) -> NormalizedResult:
    assert ours.error is None, f"our connector raised on an answer the SDK parsed: {ours.error}"
    assert ours.result is not None
    assert ours.result.collection_state == "completed", ours.result.error
    assert ours.result.error is None
    return ours.result
