"""What the direct model API adapters have in common once a response is in hand.

Direct adapters (docs/platforms.md) answer in the submit call. Each builds its own request
(`request_path`, `request_headers`, `request_body`) and reads its own wire format (`parse`). What
they share is everything around that: one HTTP transport per connector, the shape of their
capabilities, POSTing the question, and turning an answered exchange into a SubmitOutcome (a
non-2xx raises the classified error; a body cut mid-stream says where; an answer without any id
is named after the idempotency key).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

from .base import (
    Capabilities,
    Connector,
    ConnectorConfig,
    ErrorClass,
    NormalizedResult,
    SampleRequest,
    SubmitOutcome,
    UpstreamError,
)
from .errors import (
    HttpErrorClassifier,
    classify_http_error,
    error_dict,
    json_body,
    request_id_from,
)
from .streams import SSE_MIME, is_sse
from .transport import HttpExchange, HttpTransport

# Where a global API can be asked to search from (a user-location country).
REGIONS = frozenset(
    {"us", "ca", "mx", "br", "gb", "ie", "de", "fr", "es", "it", "nl", "se", "pl", "ch",
     "jp", "kr", "cn", "hk", "tw", "sg", "in", "id", "th", "vn", "au", "nz", "ae", "za"}
)  # fmt: skip
# The narrower set the Chinese vendors' international APIs (DeepSeek, Kimi) are checked for.
CN_VENDOR_REGIONS = frozenset(
    {"cn", "hk", "tw", "sg", "us", "ca", "gb", "de", "fr", "jp", "kr", "au", "in"}
)  # fmt: skip
DEVICES = frozenset({"desktop", "mobile", "api"})
ALL_MODES = frozenset({"web_search", "no_search", "deep_thinking"})
SUBMISSION_LIMIT = 100
STREAM_DEADLINE_SECONDS = 600.0


class DirectConnector(Connector):
    """A direct model API: one transport, synchronous answers, no lookup by key."""

    # What `parse` calls this API's non-streaming body, in the error for any other body.
    body_name: ClassVar[str] = "the API's response body"
    # Where `submit` POSTs the question (`request_path` may derive it per request), with these
    # query parameters.
    path: ClassVar[str] = ""
    params: ClassVar[Mapping[str, str] | None] = None
    # False for APIs that send no request id header: only the id `parse` finds in the body.
    request_id_header: ClassVar[bool] = True
    # Bound on one streamed answer, unless `extra["stream_deadline_seconds"]` says otherwise.
    stream_deadline_seconds: ClassVar[float] = STREAM_DEADLINE_SECONDS

    def __init__(self, config: ConnectorConfig) -> None:
        super().__init__(config)
        self.transport = HttpTransport(config)

    def capabilities(self) -> Capabilities:
        """Every mode, from every region; adapters narrow it with `_capabilities`."""
        return self._capabilities(ALL_MODES)

    def _capabilities(
        self,
        modes: Iterable[str],
        *,
        regions: Iterable[str] = REGIONS,
        submission_limit: int = SUBMISSION_LIMIT,
    ) -> Capabilities:
        return Capabilities(
            platform=self.platform,
            devices=DEVICES,
            regions=frozenset(regions),
            modes=frozenset(modes),
            screenshots=False,
            submission_limit=submission_limit,
            asynchronous=False,
            supports_lookup=False,
        )

    def _configured_regions(self, default: frozenset[str]) -> frozenset[str]:
        """`extra["regions"]` when the configuration names some, else `default`."""
        regions = self.config.extra.get("regions")
        return frozenset(regions) if regions else default

    def _stream_deadline(self) -> float:
        """Keep-alives reset the read timeout; this bounds a stream that never ends."""
        return float(self.config.extra.get("stream_deadline_seconds", self.stream_deadline_seconds))

    @property
    def streaming(self) -> bool:
        """Whether the question asks for a streamed answer."""
        return True

    def request_path(self, request: SampleRequest) -> str:
        return self.path

    def request_headers(self, request: SampleRequest) -> dict[str, str]:
        return self._bearer_headers()

    def request_body(self, request: SampleRequest) -> dict[str, Any]:
        raise NotImplementedError(f"{type(self).__name__} builds no request body")

    @staticmethod
    def _http_error(
        status: int, headers: dict[str, str], body: bytes, /, *, egress: str
    ) -> UpstreamError:
        """A non-2xx answer as an UpstreamError; adapters refine it with the vendor's codes."""
        return classify_http_error(status, headers, body, egress=egress)

    @classmethod
    def parse(
        cls, raw: bytes, *, content_type: str = "", sample_id: int | None = None
    ) -> NormalizedResult:
        """An SSE transcript goes to `_parse_stream`; a JSON object `_is_body` accepts to
        `_parse_json`; anything else (a login, captcha or proxy page) is unparseable."""
        if is_sse(raw, content_type):
            return cls._parse_stream(raw, content_type or SSE_MIME, sample_id)
        payload = json_body(raw)
        if not isinstance(payload, dict) or not cls._is_body(payload):
            return unparseable(raw, content_type, sample_id, cls.body_name)
        return cls._parse_json(payload, raw, content_type or "application/json", sample_id)

    @classmethod
    def _is_body(cls, payload: dict[str, Any]) -> bool:
        return True

    @classmethod
    def _parse_stream(cls, raw: bytes, mime: str, sample_id: int | None) -> NormalizedResult:
        raise NotImplementedError(f"{cls.__name__} reads no SSE transcript")

    @classmethod
    def _parse_json(
        cls, payload: dict[str, Any], raw: bytes, mime: str, sample_id: int | None
    ) -> NormalizedResult:
        raise NotImplementedError(f"{cls.__name__} reads no JSON body")

    def _bearer_headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The bearer key and an SSE Accept, which most of these APIs take, plus `extra`."""
        headers = {"Authorization": f"Bearer {self.config.api_key}", "Accept": SSE_MIME}
        return headers | dict(extra or {})

    def submit(self, request: SampleRequest, *, attempt_no: int = 1) -> SubmitOutcome:
        """POST the question and read the whole (streamed) answer into a SubmitOutcome, as
        `outcome_from_exchange` does."""
        exchange = self.transport.request(
            "POST",
            self.request_path(request),
            attempt_no=attempt_no,
            headers=self.request_headers(request),
            json_body=self.request_body(request),
            params=self.params,
            stream=self.streaming,
            deadline_seconds=self._stream_deadline(),
        )
        return outcome_from_exchange(
            exchange,
            request,
            self.parse,
            classify=self._http_error,
            request_id_header=self.request_id_header,
        )


def failed(raw: bytes, mime: str, sample_id: int | None, error: dict[str, Any]) -> NormalizedResult:
    """A result with no answer: the upstream's body is kept for review."""
    return NormalizedResult(
        sample_id=sample_id,
        upstream_id=None,
        collection_state="failed",
        evidence_state="failed",
        answer_text="",
        raw=raw,
        raw_mime=mime,
        error=error,
    )


def unparseable(raw: bytes, mime: str, sample_id: int | None, what: str) -> NormalizedResult:
    """A 200 that is not the API's shape (`what`, e.g. "a Messages API body"): a login,
    captcha or proxy error page."""
    message = f"not {what} (content-type {mime!r})"
    return failed(
        raw,
        mime or "application/octet-stream",
        sample_id,
        error_dict(ErrorClass.PARSE_FAILED, message),
    )


def accepted(result: NormalizedResult, request: SampleRequest, egress: str) -> SubmitOutcome:
    """The SubmitOutcome of an answered request; an answer without any id is named after the
    idempotency key."""
    upstream_id = result.upstream_id or result.request_id or f"noid:{request.idempotency_key}"
    return SubmitOutcome(
        upstream_id=upstream_id,
        request_id=result.request_id,
        result=result,
        egress=egress,
    )


def outcome_from_exchange(
    exchange: HttpExchange,
    request: SampleRequest,
    parse: Callable[..., NormalizedResult],
    *,
    classify: HttpErrorClassifier = classify_http_error,
    request_id_header: bool = True,
) -> SubmitOutcome:
    """One answered HTTP exchange as the SubmitOutcome of a direct model API: a non-2xx raises
    the classified UpstreamError; a body cut mid-stream says where it was cut.

    The request id is the response header's, else whatever `parse` found in the body; with
    `request_id_header=False` (APIs that send none) only the body's."""
    if not exchange.ok:
        raise classify(
            exchange.status_code, exchange.headers, exchange.body, egress=exchange.egress
        )
    result: NormalizedResult = parse(exchange.body, content_type=exchange.content_type)
    result.sample_id = request.sample_id
    result.status_code = exchange.status_code
    if request_id_header:
        result.request_id = request_id_from(exchange.headers) or result.request_id
    if exchange.interrupted and result.collection_state != "completed":
        # A body cut by the caps or the network: whatever the prefix parsed as, the answer
        # was interrupted, and the reason says where.
        result.collection_state = "truncated"
        result.error = error_dict(ErrorClass.TRUNCATED, f"stream cut: {exchange.interrupted}")
    return accepted(result, request, exchange.egress)
