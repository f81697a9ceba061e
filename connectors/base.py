"""The connector interface every platform adapter implements (docs/architecture.md).

Adapters share no request code with each other, only these types. Everything here is plain
Python (no Django models) so adapters, the simulator and `reparse` can use it anywhere.
"""

from __future__ import annotations

import abc
import enum
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

from .redaction import redact, register_proxy, register_secret


class ErrorClass(enum.StrEnum):
    """What went wrong, in the terms the retry policy acts on (docs/architecture.md)."""

    INVALID = "invalid"  # bad parameters: fail, no retry
    AUTH = "auth"  # authentication / permission / billing: fail, no retry
    UNSUPPORTED = "unsupported"  # capability the platform lacks: fail, no retry
    RATE_LIMITED = "rate_limited"  # 429: wait as told, bounded retries
    TRANSIENT = "transient"  # 408/409/5xx/529 before acceptance: backoff with jitter
    # No connection was made (refused, unresolvable, connect timeout, proxy down): the
    # platform cannot have seen the request, nor answered it. It opens the platform's circuit
    # (pipeline/circuits.py) and does not count as an attempt the platform could have answered.
    UNREACHABLE = "unreachable"
    ACCEPTANCE_UNKNOWN = "acceptance_unknown"  # sent, no answer: verify upstream first
    POLL_FAILED = "poll_failed"  # poll failed after acceptance: keep id, keep polling
    PARSE_FAILED = "parse_failed"  # answer could not be parsed: keep raw, review, never re-ask
    TRUNCATED = "truncated"  # stream ended without the completion event
    UPSTREAM_FAILED = "upstream_failed"  # upstream reported the task itself failed
    LOST = "lost"  # upstream no longer knows an accepted task


RETRYABLE_BEFORE_ACCEPTANCE = frozenset(
    {ErrorClass.RATE_LIMITED, ErrorClass.TRANSIENT, ErrorClass.UNREACHABLE}
)


class UpstreamError(Exception):
    """A classified failure talking to an upstream platform.

    `retry_after` is the upstream's own hint in seconds, when it gave one. `should_retry` is the
    upstream's explicit verdict (OpenAI's `x-should-retry`), which overrides the class's default.
    """

    def __init__(
        self,
        error_class: ErrorClass,
        message: str,
        *,
        status_code: int | None = None,
        retry_after: float | None = None,
        request_id: str | None = None,
        raw: bytes | None = None,
        egress: str | None = None,
        should_retry: bool | None = None,
    ) -> None:
        message = redact(message)
        super().__init__(message)
        self.error_class = error_class
        self.message = message
        self.status_code = status_code
        self.retry_after = retry_after
        self.request_id = request_id
        self.raw = raw
        self.egress = egress
        self.should_retry = should_retry

    # After a provider accepted a task, a failed status call must not read as "never sent":
    # these classes become POLL_FAILED, so the task id is kept and the poll tried again.
    POLL_RETRIED = frozenset({ErrorClass.TRANSIENT, ErrorClass.RATE_LIMITED,
                              ErrorClass.ACCEPTANCE_UNKNOWN})  # fmt: skip

    def after_acceptance(self) -> UpstreamError:
        """This error as a poll of an accepted task sees it: POLL_FAILED when it was a
        transient, rate-limited or unknown-acceptance failure, else itself."""
        if self.error_class not in self.POLL_RETRIED:
            return self
        return UpstreamError(
            ErrorClass.POLL_FAILED,
            self.message,
            status_code=self.status_code,
            retry_after=self.retry_after,
            request_id=self.request_id,
            egress=self.egress,
        )

    def __str__(self) -> str:
        code = f" (HTTP {self.status_code})" if self.status_code else ""
        return f"{self.error_class.value}: {self.message}{code}"


@dataclass(frozen=True)
class FoundTask:
    """A task found again by its idempotency key (`Connector.find_again`): its id and, where
    the upstream said, what it charged (minor units, currency)."""

    upstream_id: str
    cost: tuple[int, str] | None = None


@dataclass(frozen=True)
class Quote:
    """What a provider says a set of tasks will cost it, before they are submitted."""

    quote_id: str
    currency: str
    total: int  # minor units
    unit_costs: tuple[int, ...]

    def as_dict(self) -> dict[str, Any]:
        """The quote with its unit costs counted as `tasks`."""
        data = asdict(self)
        data["tasks"] = len(data.pop("unit_costs"))
        return data


@dataclass(frozen=True)
class Capabilities:
    platform: str
    devices: frozenset[str]
    regions: frozenset[str]
    modes: frozenset[str]
    screenshots: bool
    submission_limit: int
    asynchronous: bool  # True: submit returns a task id to poll; False: submit answers
    supports_lookup: bool  # can an uncertain submit be resolved by idempotency key?
    # The answer languages a target may ask for (a collection vendor's `language_code`s);
    # empty: the platform takes no language (a target naming one is refused). A target that
    # names none is asked in the region's language.
    languages: frozenset[str] = frozenset()
    # The upstream can be asked to stop a task it accepted (`Connector.cancel`): a cancelled
    # run asks it for every accepted, unfinished task (pipeline/upstream_cancel.py). None:
    # as the connector says by implementing `cancel` (`Connector.can_cancel`), so a new
    # connector with a real cancel is asked without declaring it; a vendor without one says
    # False.
    cancellable: bool | None = None

    def problems(
        self, *, device: str, region: str, mode: str, screenshot_policy: str, language: str = ""
    ) -> list[str]:
        """Why this target cannot run here; empty when it can."""
        found: list[str] = []
        checks = [("device", device, self.devices), ("region", region, self.regions),
                  ("mode", mode, self.modes)]  # fmt: skip
        if language:
            checks.append(("language", language, self.languages))
        for label, value, allowed in checks:
            if value not in allowed and label == "language" and not allowed:
                found.append(f"platform {self.platform!r} does not take a language ({value!r})")
            elif value not in allowed:
                found.append(
                    f"platform {self.platform!r} does not support {label} {value!r} "
                    f"(supported: {', '.join(sorted(allowed))})"
                )
        if screenshot_policy == "required" and not self.screenshots:
            found.append(f"platform {self.platform!r} cannot take screenshots (policy 'required')")
        return found


@dataclass(frozen=True)
class SampleRequest:
    """What a connector needs to ask one question. Never holds credentials."""

    sample_id: int
    idempotency_key: str
    question: str
    device: str
    region: str
    mode: str
    screenshot: bool = False
    model: str | None = None
    language: str = ""  # empty: the region's language (collection vendors only)


@dataclass
class Citation:
    id: str
    url: str
    normalized_url: str
    title: str | None = None
    start: int | None = None
    end: int | None = None


@dataclass
class Attachment:
    kind: str  # "screenshot", ...
    content: bytes
    mime: str


@dataclass
class NormalizedResult:
    """The one shape every adapter produces (docs/architecture.md)."""

    sample_id: int | None
    upstream_id: str | None
    collection_state: str  # "completed" | "failed" | "truncated"
    evidence_state: str  # "stored" | "partial" | "failed" (what the adapter could obtain)
    answer_text: str
    raw: bytes  # exactly as received on the wire
    raw_mime: str
    citations: list[Citation] = field(default_factory=list)
    screenshot_key: str | None = None
    captured_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    status_code: int | None = None
    error: dict[str, Any] | None = None  # {"class": ErrorClass value, "message": str}
    warnings: list[str] = field(default_factory=list)
    cost: int | None = None  # upstream cost in minor units, when the upstream reports it
    cost_currency: str | None = None
    request_id: str | None = None
    attachments: list[Attachment] = field(default_factory=list)
    # The web searches the engine says it ran for this answer (query fan-out), in order,
    # duplicates dropped; empty where the protocol does not expose them.
    search_queries: list[str] = field(default_factory=list)
    # Sources the engine consulted (search results, grounding chunks) that no part of the
    # answer cites; numbered `f1`, `f2`, ... (connectors/citations.py `found_sources`).
    found: list[Citation] = field(default_factory=list)

    @classmethod
    def answer(
        cls,
        raw: bytes,
        raw_mime: str,
        sample_id: int | None,
        upstream_id: str | None,
        answer_text: str,
        **fields: Any,
    ) -> NormalizedResult:
        """A completed answer with its evidence stored (`fail` and `cut` say otherwise)."""
        return cls(sample_id, upstream_id, "completed", "stored", answer_text, raw, raw_mime,
                   **fields)  # fmt: skip

    def fail(self, error: dict[str, Any] | None) -> None:
        """Not an answer: the upstream failed it, and there is no evidence of one."""
        self.collection_state, self.evidence_state, self.error = "failed", "failed", error

    def cut(self, message: str) -> None:
        """The answer stopped part way (`message` says where): what arrived is partial
        evidence."""
        self.collection_state, self.evidence_state = "truncated", "partial"
        self.error = {"class": ErrorClass.TRUNCATED.value, "message": message}

    def as_dict(self) -> dict[str, Any]:
        """The JSON form of NormalizedResult; raw bytes are shown as text, attachments by size."""
        data = asdict(self)
        data["raw"] = self.raw.decode("utf-8", errors="replace")
        data["captured_at"] = self.captured_at.isoformat().replace("+00:00", "Z")
        data["attachments"] = [
            {"kind": a.kind, "mime": a.mime, "size": len(a.content)} for a in self.attachments
        ]
        return data


@dataclass(frozen=True)
class SubmitOutcome:
    """The upstream accepted the request.

    Direct model APIs answer in the same call: `result` is set. Collection providers return a
    task id to poll: `result` is None.
    """

    upstream_id: str
    request_id: str | None = None
    result: NormalizedResult | None = None
    egress: str | None = None
    # What accepting the task cost, when the upstream states it at submission (a vendor that
    # charges when a task is posted: DataForSEO); minor units of `cost_currency`.
    cost: int | None = None
    cost_currency: str | None = None


@dataclass(frozen=True)
class PollOutcome:
    state: str  # "queued" | "running" | "completed" | "failed" | "lost"
    retry_after: float | None = None
    message: str | None = None


DEFAULT_MAX_RESPONSE_BYTES = 32 * 1024 * 1024
DEFAULT_MAX_RESPONSE_SECONDS = 900.0


@dataclass(frozen=True)
class ConnectorConfig:
    """Per-platform settings. `api_key` comes from the environment or the database and is
    never logged, queued or stored with evidence."""

    platform: str
    base_url: str
    api_key: str = field(repr=False, default="")
    model: str | None = None
    timeout_seconds: float = 60.0
    connect_timeout_seconds: float = 5.0
    egress_proxies: tuple[str | None, ...] = (None,)  # None = direct
    extra: dict[str, Any] = field(default_factory=dict)
    # Caps on one response, decoded (after gzip): beyond either the body is cut there and the
    # answer is interrupted with the reason (connectors/transport.py).
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    max_response_seconds: float = DEFAULT_MAX_RESPONSE_SECONDS

    def __post_init__(self) -> None:
        register_secret(self.api_key)
        for proxy in self.egress_proxies:
            register_proxy(proxy)


class Connector(abc.ABC):
    platform: ClassVar[str]

    def __init__(self, config: ConnectorConfig) -> None:
        self.config = config

    @abc.abstractmethod
    def capabilities(self) -> Capabilities: ...

    @abc.abstractmethod
    def submit(self, request: SampleRequest, *, attempt_no: int = 1) -> SubmitOutcome:
        """Ask the question. Raises UpstreamError; ACCEPTANCE_UNKNOWN when the request was
        sent but no answer came back."""

    def submit_batch(
        self,
        requests: list[SampleRequest],
        *,
        attempt_no: int = 1,
        idempotency_key: str | None = None,
    ) -> list[SubmitOutcome | UpstreamError]:
        """Ask several questions; one outcome per request, in order. Platforms that accept
        batches (the collection provider) send them in one call; others ask one by one."""
        outcomes: list[SubmitOutcome | UpstreamError] = []
        for request in requests:
            try:
                outcomes.append(self.submit(request, attempt_no=attempt_no))
            except UpstreamError as error:
                outcomes.append(error)
        return outcomes

    def quote(self, requests: list[SampleRequest]) -> Quote | None:
        """The provider's own price for these tasks, where it gives one (None: it does not)."""
        return None

    def poll(self, upstream_id: str) -> PollOutcome:
        """Asynchronous platforms only."""
        raise UpstreamError(ErrorClass.UNSUPPORTED, f"{self.platform} has nothing to poll")

    def fetch_evidence(self, upstream_id: str, *, sample_id: int | None = None) -> NormalizedResult:
        """Asynchronous platforms only: the finished task's answer and attachments."""
        raise UpstreamError(ErrorClass.UNSUPPORTED, f"{self.platform} has no separate evidence")

    def can_cancel(self) -> bool:
        """Whether a cancelled run asks this upstream to stop its accepted tasks: as its
        capabilities declare, else whether this connector implements `cancel`."""
        declared = self.capabilities().cancellable
        return declared if declared is not None else type(self).cancel is not Connector.cancel

    def cancel(self, upstream_id: str) -> bool:
        """Ask the upstream to stop an accepted task (platforms whose capabilities say
        `cancellable`). True when the upstream acknowledged that it stopped the task; False
        when it answered and declined (the task had finished, or it no longer knows it).
        Raises UpstreamError when the request failed (unreachable, refused, no answer): the
        caller counts it against the platform's circuit and records the error."""
        return False

    def find_again(self, idempotency_key: str) -> FoundTask | None:
        """`lookup` for the verify step: the task the upstream has for this key, with what it
        charged for it where the same answer states it (a vendor's task list), so a task whose
        submission answer was lost is found and priced in one call; None when the upstream has
        no such task."""
        upstream_id = self.lookup(idempotency_key)
        return FoundTask(upstream_id) if upstream_id else None

    def lookup(self, idempotency_key: str) -> str | None:
        """Resolve an uncertain submit: the upstream id for this key, or None when the upstream
        has no such task. Raises UpstreamError(UNSUPPORTED) where the platform cannot tell."""
        raise UpstreamError(ErrorClass.UNSUPPORTED, f"{self.platform} cannot look up by key")

    @classmethod
    @abc.abstractmethod
    def parse(
        cls, raw: bytes, *, content_type: str = "", sample_id: int | None = None
    ) -> NormalizedResult:
        """Derive the normalized result from a raw response exactly as received (a JSON body,
        or an SSE / NDJSON transcript). The live path and `reparse` both call this."""
