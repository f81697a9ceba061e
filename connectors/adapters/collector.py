"""A collection provider: a third-party service that asks the question on a platform's consumer
UI (ChatGPT, Perplexity, Doubao ... in a real browser, desktop or mobile) and returns the
answer, citations, a screenshot and what the task cost. Asynchronous: submit returns task ids.

HTTP API (JSON; `Authorization: Bearer <key>` on every call; errors are
`{"error": {"code", "message"}}` with the usual statuses, 429 with `Retry-After`):

POST /v1/quotes
    {"tasks": [{"platform", "device", "region", "mode", "screenshot"}]}
    -> 200 {"quote_id", "currency", "total", "items": [{"unit_cost"}], "expires_at"}
POST /v1/batches                       header `Idempotency-Key` (required)
    {"tasks": [{"client_key", "question", "platform", "device", "region", "mode",
                "screenshot"}], "callback_url": optional}
    at most 100 tasks (400 `batch_too_large`); `client_key` unique per account.
    -> 202 {"batch_id", "tasks": [{"client_key", "task_id", "status"}]}
    The same key with the same body returns the same batch (200, header
    `Idempotent-Replayed: true`); the same key with a different body is 422
    `idempotency_key_reused`. A `client_key` already known maps to its existing task.
GET  /v1/tasks/{task_id}
    -> 200 {"task_id", "client_key", "status": "queued|running|completed|failed|cancelled|lost",
            "retry_after_seconds": float|null, "error": {"code", "message"}|null}
    -> 404 `task_not_found` when the provider no longer knows the task.
GET  /v1/tasks/{task_id}/result
    -> 200 {"task_id", "client_key", "status", "platform", "device", "region", "mode",
            "answer_text", "citations": [{"url", "title", "start", "end"}]  (str offsets),
            "screenshot_requested": bool,
            "screenshot": {"mime": "image/png", "width", "height", "data_base64"} | null,
            "screenshot_error": str | null, "cost": {"amount": int (minor units), "currency"},
            "captured_at", "error": {"code", "message"} | null}
    -> 409 `task_not_finished` while queued or running; 404 as above.
POST /v1/tasks/{task_id}/cancel
    -> 200 {"task_id", "status", "cancelled": bool}   (finished tasks are not cancelled)
GET  /v1/tasks?client_key=K
    -> 200 {"tasks": [{"task_id", "client_key", "status"}]}   (empty when unknown)
Callbacks (optional): POST {callback_url} with
    {"delivery_id", "event": "task.completed|task.failed", "task_id", "client_key", "status"}
    and header `X-Collector-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret,
    "<t>." + body)>`. A delivery may arrive more than once with the same `delivery_id`;
    receivers dedupe on it and treat the callback as a hint to poll, never as the result.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from ..base import (
    Attachment,
    Capabilities,
    Citation,
    Connector,
    ConnectorConfig,
    ErrorClass,
    NormalizedResult,
    PollOutcome,
    Quote,
    SampleRequest,
    SubmitOutcome,
    UpstreamError,
)
from ..citations import CitationList
from ..direct import failed
from ..errors import classify_http_error, error_dict, json_body, request_id_from
from ..transport import HttpExchange, HttpTransport, header_safe, submit_answer_cut

SUBMISSION_LIMIT = 100
SIGNATURE_HEADER = "X-Collector-Signature"
SCREENSHOT_UNAVAILABLE = "SCREENSHOT_UNAVAILABLE"
PNG_MIME = "image/png"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_POLL_STATES = {
    "queued": "queued",
    "running": "running",
    "completed": "completed",
    "failed": "failed",
    "cancelled": "failed",
    "lost": "lost",
}


# A task refused inside an accepted batch follows its own error class.
_REFUSAL_CLASSES = {
    "rate_limited": ErrorClass.RATE_LIMITED,
    "temporarily_unavailable": ErrorClass.TRANSIENT,
    "quota_exceeded": ErrorClass.AUTH,
    "region_unavailable": ErrorClass.UNSUPPORTED,
    "invalid_task": ErrorClass.INVALID,
}


@dataclass(frozen=True)
class CallbackEvent:
    delivery_id: str
    event: str
    task_id: str
    client_key: str | None
    status: str


CALLBACK_STRING_FIELDS = ("delivery_id", "event", "task_id", "status")


def sign_callback(body: bytes, secret: str, *, timestamp: int) -> str:
    """The signature header value the provider sends (used by the simulator and tests)."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={digest.hexdigest()}"


def verify_callback_signature(
    body: bytes,
    header: str,
    secret: str,
    *,
    tolerance_seconds: float = 300.0,
    now: float | None = None,
) -> bool:
    """True when `header` signs `body` with `secret` and is recent (replays are rejected)."""
    fields: dict[str, list[str]] = {}
    for item in header.split(","):
        name, _, value = item.strip().partition("=")
        fields.setdefault(name, []).append(value)
    try:
        timestamp = int(fields["t"][0])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance_seconds:
        return False
    expected = sign_callback(body, secret, timestamp=timestamp).rpartition("v1=")[2]
    # compare_digest refuses non-ASCII str with a TypeError; such a signature is simply wrong.
    return any(
        given.isascii() and hmac.compare_digest(expected, given) for given in fields.get("v1", [])
    )


def parse_callback(body: bytes) -> CallbackEvent:
    payload = json_body(body)
    if not isinstance(payload, dict) or not payload.get("task_id"):
        raise UpstreamError(ErrorClass.PARSE_FAILED, "callback body is not a task event")
    fields = {name: payload.get(name) or "" for name in CALLBACK_STRING_FIELDS}
    for name, value in fields.items():
        if not isinstance(value, str):
            raise UpstreamError(
                ErrorClass.PARSE_FAILED,
                f"callback {name} must be a string, not {type(value).__name__}",
            )
    client_key = payload.get("client_key")
    return CallbackEvent(
        delivery_id=fields["delivery_id"],
        event=fields["event"],
        task_id=fields["task_id"],
        client_key=client_key if isinstance(client_key, str) else None,
        status=fields["status"],
    )


def batch_key(requests: list[SampleRequest]) -> str:
    """A stable Idempotency-Key for a batch: the same samples always make the same key."""
    joined = "\n".join(sorted(request.idempotency_key for request in requests))
    return "batch-" + hashlib.sha256(joined.encode()).hexdigest()[:32]


class CollectorConnector(Connector):
    platform: ClassVar[str] = "collector"
    default_base_url: ClassVar[str] = "https://collector.invalid"

    def __init__(self, config: ConnectorConfig) -> None:
        super().__init__(config)
        self.transport = HttpTransport(config)

    def capabilities(self) -> Capabilities:
        return Capabilities(
            platform=self.platform,
            devices=frozenset({"desktop", "mobile"}),
            regions=frozenset({"us", "gb", "de", "fr", "jp", "kr", "cn", "sg", "au", "ca", "in"}),
            modes=frozenset({"web_search", "deep_thinking", "no_search"}),
            screenshots=True,
            submission_limit=SUBMISSION_LIMIT,
            asynchronous=True,
            supports_lookup=True,
            cancellable=True,
        )

    @property
    def target_platform(self) -> str:
        """Which consumer UI the provider drives for this connector."""
        return str(self.config.extra.get("target_platform", "chatgpt"))

    def _call(
        self,
        method: str,
        path: str,
        *,
        attempt_no: int = 1,
        body: Any = None,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> HttpExchange:
        auth = {"Authorization": f"Bearer {self.config.api_key}", "Accept": "application/json"}
        return self.transport.request(
            method,
            path,
            attempt_no=attempt_no,
            json_body=body,
            params=params,
            headers=auth | (headers or {}),
        )

    @staticmethod
    def _json(exchange: HttpExchange) -> dict[str, Any]:
        if not exchange.ok:
            raise classify_http_error(
                exchange.status_code, exchange.headers, exchange.body, egress=exchange.egress
            )
        payload = json_body(exchange.body)
        if not isinstance(payload, dict):
            cut = f" (cut: {exchange.interrupted})" if exchange.interrupted else ""
            raise exchange.error(
                ErrorClass.PARSE_FAILED, f"collector answered with a non-JSON body{cut}"
            )
        return payload

    def _task_spec(self, request: SampleRequest) -> dict[str, Any]:
        spec = {"client_key": request.idempotency_key, "question": request.question,
                "platform": self.target_platform}  # fmt: skip
        return spec | {k: getattr(request, k) for k in ("device", "region", "mode", "screenshot")}

    def quote(self, requests: list[SampleRequest]) -> Quote | None:
        specs = [
            {k: v for k, v in self._task_spec(r).items() if k not in ("client_key", "question")}
            for r in requests
        ]
        payload = self._json(self._call("POST", "/v1/quotes", body={"tasks": specs}))
        return Quote(
            quote_id=str(payload.get("quote_id", "")),
            currency=str(payload.get("currency", "")),
            total=int(payload.get("total", 0)),
            unit_costs=tuple(int(item.get("unit_cost", 0)) for item in payload.get("items", [])),
        )

    def submit(self, request: SampleRequest, *, attempt_no: int = 1) -> SubmitOutcome:
        [outcome] = self.submit_batch(
            [request], attempt_no=attempt_no, idempotency_key=request.idempotency_key
        )
        if isinstance(outcome, UpstreamError):
            raise outcome
        return outcome

    def submit_batch(
        self,
        requests: list[SampleRequest],
        *,
        attempt_no: int = 1,
        idempotency_key: str | None = None,
    ) -> list[SubmitOutcome | UpstreamError]:
        """Submit up to the submission limit in one call; one outcome per request, in order.
        A batch may be accepted in part: an accepted task is a SubmitOutcome with its task id,
        a refused one the UpstreamError of its own error class, and a task the answer does not
        mention is ACCEPTANCE_UNKNOWN (recovery looks it up by its client key). Resending the
        same requests (same key) is safe: the provider returns the same tasks. A failure of
        the whole call raises."""
        if not requests:
            return []
        if len(requests) > SUBMISSION_LIMIT:
            raise UpstreamError(
                ErrorClass.INVALID, f"batch of {len(requests)} exceeds limit {SUBMISSION_LIMIT}"
            )
        body: dict[str, Any] = {"tasks": [self._task_spec(r) for r in requests]}
        if self.config.extra.get("callback_url"):
            body["callback_url"] = str(self.config.extra["callback_url"])
        exchange = self._call(
            "POST",
            "/v1/batches",
            attempt_no=attempt_no,
            body=body,
            headers={"Idempotency-Key": header_safe(idempotency_key or batch_key(requests))},
        )
        cut = submit_answer_cut(exchange)
        if cut is not None:
            raise cut
        payload = self._json(exchange)
        answered = {
            str(task.get("client_key")): task
            for task in payload.get("tasks", [])
            if isinstance(task, dict)
        }
        request_id = request_id_from(exchange.headers, exchange.body)
        return [
            self._task_outcome(answered.get(r.idempotency_key), exchange, request_id)
            for r in requests
        ]

    @staticmethod
    def _task_outcome(
        task: dict[str, Any] | None, exchange: HttpExchange, request_id: str | None
    ) -> SubmitOutcome | UpstreamError:
        if task is not None and task.get("task_id"):
            return SubmitOutcome(
                upstream_id=str(task["task_id"]), request_id=request_id, egress=exchange.egress
            )
        if task is None:
            # The batch was accepted, but we cannot tell which task is ours: look it up.
            return UpstreamError(
                ErrorClass.ACCEPTANCE_UNKNOWN,
                "batch answer lacks this client key",
                status_code=exchange.status_code,
                request_id=request_id,
                egress=exchange.egress,
            )
        error = _as_dict(task.get("error"))
        code = str(error.get("code", "rejected"))
        return UpstreamError(
            _REFUSAL_CLASSES.get(code, ErrorClass.INVALID),
            f"{code}: {error.get('message', 'task refused in an accepted batch')}",
            status_code=exchange.status_code,
            request_id=request_id,
            egress=exchange.egress,
        )

    def poll(self, upstream_id: str) -> PollOutcome:
        try:
            exchange = self._call("GET", f"/v1/tasks/{upstream_id}")
        except UpstreamError as error:
            raise error.after_acceptance() from None
        if exchange.status_code == 404:
            return PollOutcome(state="lost", message="collector no longer knows this task")
        try:
            payload = self._json(exchange)
        except UpstreamError as error:
            raise error.after_acceptance() from None
        status = str(payload.get("status", ""))
        message = _as_dict(payload.get("error")).get("message")
        if status == "cancelled" and not message:
            message = "the task was cancelled upstream"  # the failure reason says why
        hint = payload.get("retry_after_seconds")
        return PollOutcome(
            state=_POLL_STATES.get(status, "running"),
            retry_after=float(hint) if isinstance(hint, int | float) else None,
            message=str(message) if message else None,
        )

    def fetch_evidence(self, upstream_id: str, *, sample_id: int | None = None) -> NormalizedResult:
        exchange = self._call("GET", f"/v1/tasks/{upstream_id}/result")
        if exchange.status_code == 404:
            raise UpstreamError(ErrorClass.LOST, "collector no longer knows this task", raw=b"")
        if not exchange.ok:
            raise classify_http_error(
                exchange.status_code, exchange.headers, exchange.body, egress=exchange.egress
            ).after_acceptance()
        result = self.parse(exchange.body, content_type=exchange.content_type, sample_id=sample_id)
        result.status_code = exchange.status_code
        result.request_id = request_id_from(exchange.headers, exchange.body)
        result.upstream_id = result.upstream_id or upstream_id
        return result

    def cancel(self, upstream_id: str) -> bool:
        exchange = self._call("POST", f"/v1/tasks/{upstream_id}/cancel")
        if exchange.status_code == 404:
            return False  # the provider no longer knows the task: nothing left to stop
        return self._json(exchange).get("cancelled") is True

    def lookup(self, idempotency_key: str) -> str | None:
        payload = self._json(self._call("GET", "/v1/tasks", params={"client_key": idempotency_key}))
        for task in payload.get("tasks", []):
            if isinstance(task, dict) and task.get("client_key") == idempotency_key:
                return str(task["task_id"])
        return None

    @classmethod
    def parse(
        cls, raw: bytes, *, content_type: str = "", sample_id: int | None = None
    ) -> NormalizedResult:
        payload = json_body(raw)
        mime = content_type or "application/json"
        if not isinstance(payload, dict) or "status" not in payload:
            return failed(
                raw,
                mime,
                sample_id,
                error_dict(ErrorClass.PARSE_FAILED, "not a collector task result"),
            )
        text = str(payload.get("answer_text") or "")
        task_id = str(payload["task_id"]) if payload.get("task_id") else None
        citations = _citations(payload.get("citations"), len(text))
        result = NormalizedResult.answer(raw, mime, sample_id, task_id, text, citations=citations)
        _apply_cost(result, payload.get("cost"))
        if payload.get("status") != "completed":
            error = _as_dict(payload.get("error"))
            message = str(error.get("message") or f"task {payload.get('status')}")
            result.fail(error_dict(ErrorClass.UPSTREAM_FAILED, message, code=error.get("code")))
            return result
        _apply_screenshot(result, payload)
        return result


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _citations(items: Any, text_length: int) -> list[Citation]:
    citations = CitationList(text_length)
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and item.get("url"):
            start, end = item.get("start"), item.get("end")
            citations.add(
                str(item["url"]),
                title=item.get("title"),
                start=start if isinstance(start, int) else None,
                end=end if isinstance(end, int) else None,
            )
    return citations.items


def _apply_cost(result: NormalizedResult, cost: Any) -> None:
    if isinstance(cost, dict) and isinstance(cost.get("amount"), int):
        result.cost = cost["amount"]
        result.cost_currency = str(cost.get("currency") or "") or None


def _apply_screenshot(result: NormalizedResult, payload: dict[str, Any]) -> None:
    if not payload.get("screenshot_requested"):
        return
    shot = payload.get("screenshot")
    if isinstance(shot, dict) and (png := _decode_png(shot.get("data_base64"))):
        result.attachments.append(Attachment("screenshot", png, str(shot.get("mime") or PNG_MIME)))
        return
    # The answer is still usable; only the screenshot is missing (docs/architecture.md).
    result.evidence_state = "partial"
    result.warnings.append(SCREENSHOT_UNAVAILABLE)


def _decode_png(data: Any) -> bytes:
    if not isinstance(data, str):
        return b""
    try:
        png = base64.b64decode(data, validate=True)
    except ValueError:
        return b""
    return png if png.startswith(PNG_SIGNATURE) else b""


def callback_body(payload: dict[str, Any]) -> bytes:
    """The exact bytes a callback carries (compact JSON, UTF-8), for signing."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
