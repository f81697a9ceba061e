"""What the direct model API adapters have in common once a response is in hand.

Direct adapters (DESIGN.md §7) answer in the submit call. They share no request code: each
builds its own request and reads its own wire format. What they do share is everything around
that: one HTTP transport per connector, the shape of their capabilities, and turning an answered
exchange into a SubmitOutcome (a non-2xx raises the classified error; a body cut mid-stream says
where; an answer without any id is named after the idempotency key).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

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
from .errors import classify_http_error, error_dict, request_id_from
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


class HttpErrorClassifier(Protocol):
    """`classify_http_error`, or an adapter's refinement of it."""

    def __call__(
        self, status_code: int, headers: dict[str, str], body: bytes, /, *, egress: str
    ) -> UpstreamError: ...


class DirectConnector(Connector):
    """A direct model API: one transport, synchronous answers, no lookup by key."""

    def __init__(self, config: ConnectorConfig) -> None:
        super().__init__(config)
        self.transport = HttpTransport(config)

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

    def _stream_deadline(self, default: float = STREAM_DEADLINE_SECONDS) -> float:
        """Keep-alives reset the read timeout; this bounds a stream that never ends."""
        return float(self.config.extra.get("stream_deadline_seconds", default))


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
