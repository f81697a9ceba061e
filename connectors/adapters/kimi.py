"""Moonshot Kimi with the `$web_search` builtin function (docs/platforms.md §7).

Search is a tool-call loop the client drives. Round 1 declares
`tools: [{"type": "builtin_function", "function": {"name": "$web_search"}}]` (thinking disabled,
as Kimi requires) and usually ends with `finish_reason: "tool_calls"`; the client appends the
assistant message and one `tool` message per call echoing the `arguments` string unchanged, and
asks again, until a round ends with `stop`. Rounds are bounded (`max_rounds`, default 3): a loop
still asking for searches after the last round fails with a clear error instead of spending
without end. Every round streams and ends with its own `data: [DONE]`.

Evidence: the raw is one JSON envelope holding every round — the request body we sent, status,
the headers that matter (content type, `Msh-Request-Id`, `Retry-After`, rate-limit headers) and
the body exactly as received (UTF-8 text, or base64 when the bytes are not valid UTF-8, e.g. a
stream cut inside a character):

    {"object": "geo.kimi.rounds", "version": 1, "max_rounds": 3,
     "rounds": [{"round": 1, "request": {...}, "egress": "direct", "status_code": 200,
                 "headers": {...}, "body": "data: {...}\\n\\n...data: [DONE]\\n\\n",
                 "interrupted": null}, ...]}

`parse()` reads the envelope back deterministically, so `reparse` and the live path agree; it
also accepts a single round captured on its own (an SSE transcript or a JSON body).

Citations: Kimi returns none structured; sources exist only as links the model writes into the
answer. Those links are extracted with their positions and the result says so with the warning
`CITATIONS_FROM_TEXT`, so reports can tell them from structured citations.

Errors: `{"error": {"type", "message"}}`; 429 `rate_limit_reached_error` carries `Retry-After`;
`exceeded_current_quota_error` (also a 429) is a billing problem and is not retried. A failure
in round 1 raises like any direct API. A failure in a later round raises too (with the retry
hint), and the UpstreamError's `raw` holds the envelope of every round so far.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .. import chat_format, safejson
from ..base import (
    Capabilities,
    Citation,
    ErrorClass,
    NormalizedResult,
    SampleRequest,
    SubmitOutcome,
    UpstreamError,
)
from ..citations import CitationList, normalize_url
from ..direct import CN_VENDOR_REGIONS, DirectConnector, accepted, failed
from ..errors import (
    classify_error_code,
    classify_http_error,
    error_dict,
    json_body,
    request_id_from,
)
from ..transport import HttpExchange

ENVELOPE_OBJECT = "geo.kimi.rounds"
ENVELOPE_MIME = "application/vnd.geo.kimi-rounds+json"
ENVELOPE_VERSION = 1
DEFAULT_MAX_ROUNDS = 3
WEB_SEARCH = "$web_search"
WEB_SEARCH_TOOL = {"type": "builtin_function", "function": {"name": WEB_SEARCH}}
CHAT_PATH = "/v1/chat/completions"
CITATIONS_FROM_TEXT = "CITATIONS_FROM_TEXT"
KEPT_HEADERS = (
    "content-type",
    "msh-request-id",
    "x-msh-trace-id",
    "retry-after",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
)
# Kimi's error `type`s (platform.kimi.ai errors page, managed-agents vocabulary).
_KIMI_TYPES: dict[str, ErrorClass] = {
    "rate_limit_reached_error": ErrorClass.RATE_LIMITED,
    "engine_overloaded_error": ErrorClass.RATE_LIMITED,
    "exceeded_current_quota_error": ErrorClass.AUTH,
    "invalid_authentication_error": ErrorClass.AUTH,
    "incorrect_api_key_error": ErrorClass.AUTH,
    "permission_denied_error": ErrorClass.AUTH,
    "content_filter": ErrorClass.INVALID,
    "invalid_request_error": ErrorClass.INVALID,
    "resource_not_found_error": ErrorClass.INVALID,
    "server_error": ErrorClass.TRANSIENT,
}
# A 429 that waiting will not cure: the account is out of quota.
_BILLING_TYPES = frozenset({"exceeded_current_quota_error"})


def classify_kimi_code(code: str | None) -> ErrorClass:
    if code and code.lower() in _KIMI_TYPES:
        return _KIMI_TYPES[code.lower()]
    return classify_error_code(code)


def classify_kimi_http(
    status_code: int, headers: dict[str, str], body: bytes, *, egress: str | None = None
) -> UpstreamError:
    error = classify_http_error(status_code, headers, body, egress=egress)
    payload = json_body(body)
    upstream = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(upstream, dict) and {upstream.get("type"), upstream.get("code")} & _BILLING_TYPES:
        error.error_class = ErrorClass.AUTH
    return error


# --- citations written into the text --------------------------------------------------------

_MARKDOWN_LINK = re.compile(r"\[([^\]\n]{1,300})\]\((https?://[^\s()<>]+)\)")
# Bare URLs stop at the first non-ASCII character: in Chinese answers the sentence runs on
# straight after the URL. (Markdown links have explicit delimiters and keep any character.)
_BARE_URL = re.compile(r"https?://[^\s\"'()<>\[\]{}`\u0080-\U0010ffff]+")
_TRAILING = ".,;:!?'\"*_"


def citations_in_text(text: str) -> list[Citation]:
    """Markdown links `[title](url)` and bare http(s) URLs the model wrote, in order of first
    appearance, one per normalized URL; the span is the link as written."""
    found: list[tuple[int, int, str, str | None]] = []
    taken: list[range] = []
    for match in _MARKDOWN_LINK.finditer(text):
        found.append((match.start(), match.end(), match.group(2), match.group(1).strip()))
        taken.append(range(match.start(), match.end()))
    for match in _BARE_URL.finditer(text):
        if any(match.start() in span for span in taken):
            continue
        url = match.group(0).rstrip(_TRAILING)
        found.append((match.start(), match.start() + len(url), url, None))
    citations = CitationList(len(text))
    seen: set[str] = set()
    for start, end, url, title in sorted(found):
        if normalize_url(url) in seen:
            continue
        seen.add(normalize_url(url))
        citations.add(url, title=title, start=start, end=end)
    return citations.items


# --- the envelope ---------------------------------------------------------------------------


def _encode_body(body: bytes) -> dict[str, str]:
    try:
        return {"body": body.decode("utf-8")}
    except UnicodeDecodeError:
        return {"body_base64": base64.b64encode(body).decode("ascii")}


def _decode_body(record: dict[str, Any]) -> bytes:
    if isinstance(record.get("body_base64"), str):
        try:
            return base64.b64decode(record["body_base64"], validate=True)
        except (binascii.Error, ValueError):
            return b""
    body = record.get("body")
    return body.encode("utf-8") if isinstance(body, str) else b""


def round_record(
    round_no: int, request_body: dict[str, Any], exchange: HttpExchange
) -> dict[str, Any]:
    return {
        "round": round_no,
        "request": request_body,
        "egress": exchange.egress,
        "status_code": exchange.status_code,
        "headers": {k: exchange.headers[k] for k in KEPT_HEADERS if k in exchange.headers},
        **_encode_body(exchange.body),
        "interrupted": exchange.interrupted,
    }


def envelope_bytes(rounds: list[dict[str, Any]], max_rounds: int) -> bytes:
    envelope = {
        "object": ENVELOPE_OBJECT,
        "version": ENVELOPE_VERSION,
        "max_rounds": max_rounds,
        "rounds": rounds,
    }
    return json.dumps(envelope, ensure_ascii=False).encode("utf-8")


def _read_envelope(raw: bytes) -> dict[str, Any] | None:
    try:
        payload = safejson.loads(raw)
    except (UnicodeDecodeError, ValueError):
        return None
    if isinstance(payload, dict) and payload.get("object") == ENVELOPE_OBJECT:
        return payload
    return None


@dataclass
class _Round:
    """One round of the envelope as the parser sees it."""

    number: int
    status_code: int | None
    headers: dict[str, str]
    body: bytes
    interrupted: str | None
    transport_error: dict[str, Any] | None
    completion: chat_format.ChatCompletion | None = None

    @classmethod
    def from_record(cls, record: dict[str, Any], position: int) -> _Round:
        headers = record.get("headers") if isinstance(record.get("headers"), dict) else {}
        status = record.get("status_code")
        error = record.get("error")
        round_ = cls(
            number=record["round"] if isinstance(record.get("round"), int) else position,
            status_code=status if isinstance(status, int) else None,
            headers={str(k).lower(): str(v) for k, v in (headers or {}).items()},
            body=_decode_body(record),
            interrupted=record.get("interrupted") or None,
            transport_error=error if isinstance(error, dict) else None,
        )
        if round_.ok:
            round_.completion = chat_format.read_body(round_.body, round_.content_type)
        return round_

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300

    def asks_for_search(self) -> bool:
        completion = self.completion
        return (
            completion is not None
            and completion.error is None
            and completion.done
            and completion.finish_reason == "tool_calls"
            and bool(completion.tool_calls)
        )


@dataclass
class _Parsed:
    rounds: list[_Round] = field(default_factory=list)
    max_rounds: int | None = None


class KimiConnector(DirectConnector):
    platform: ClassVar[str] = "kimi"
    default_base_url: ClassVar[str] = "https://api.moonshot.cn"

    @property
    def max_rounds(self) -> int:
        return max(1, int(self.config.extra.get("max_rounds", DEFAULT_MAX_ROUNDS)))

    def capabilities(self) -> Capabilities:
        regions = self._configured_regions(CN_VENDOR_REGIONS)
        # Thinking must be off while $web_search is declared, so there is no deep mode.
        return self._capabilities({"web_search", "no_search"}, regions=regions)

    def request_body(
        self, request: SampleRequest, messages: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """One round's body: `messages` so far, by default the question alone."""
        body: dict[str, Any] = {
            "model": request.model or self.config.model,
            "messages": messages or [{"role": "user", "content": request.question}],
            "stream": True,
        }
        if request.mode == "web_search":
            body["tools"] = [WEB_SEARCH_TOOL]
            if self.config.extra.get("send_thinking", True):
                body["thinking"] = {"type": "disabled"}
        return body

    @staticmethod
    def echo_messages(completion: chat_format.ChatCompletion) -> list[dict[str, Any]]:
        """The assistant turn and one tool message per call, arguments echoed unchanged."""
        assistant: dict[str, Any] = {
            "role": "assistant",
            "content": completion.content,
            "tool_calls": [call.to_message() for call in completion.tool_calls],
        }
        if completion.reasoning:  # thinking models insist on getting it back
            assistant["reasoning_content"] = completion.reasoning
        tools = [
            {
                "role": "tool",
                "tool_call_id": call.id,
                "name": call.name,
                "content": call.arguments,
            }
            for call in completion.tool_calls
        ]
        return [assistant, *tools]

    def submit(self, request: SampleRequest, *, attempt_no: int = 1) -> SubmitOutcome:
        messages: list[dict[str, Any]] = [{"role": "user", "content": request.question}]
        rounds: list[dict[str, Any]] = []
        exchange: HttpExchange | None = None
        for round_no in range(1, self.max_rounds + 1):
            body = self.request_body(request, messages)
            exchange = self._send(round_no, body, rounds, attempt_no)
            rounds.append(round_record(round_no, body, exchange))
            if not exchange.ok:
                raise self._round_error(round_no, exchange, rounds)
            completion = chat_format.read_body(exchange.body, exchange.content_type)
            if completion is None:
                break
            calls = completion.tool_calls
            searching = completion.done and completion.finish_reason == "tool_calls" and calls
            if not searching or any(call.name != WEB_SEARCH for call in calls):
                break
            messages = [*messages, *self.echo_messages(completion)]
        assert exchange is not None
        result = self.parse(
            envelope_bytes(rounds, self.max_rounds),
            content_type=ENVELOPE_MIME,
            sample_id=request.sample_id,
        )
        return accepted(result, request, exchange.egress)

    def _send(
        self, round_no: int, body: dict[str, Any], rounds: list[dict[str, Any]], attempt_no: int
    ) -> HttpExchange:
        try:
            return self.transport.request(
                "POST",
                CHAT_PATH,
                attempt_no=attempt_no,
                headers=self._bearer_headers(),
                json_body=body,
                stream=True,
                deadline_seconds=self._stream_deadline(),
            )
        except UpstreamError as error:
            if round_no == 1:
                raise
            # A later round: the searches already paid for stay on record.
            rounds.append(
                {
                    "round": round_no,
                    "request": body,
                    "egress": error.egress,
                    "error": error_dict(error.error_class, error.message),
                }
            )
            error.message = f"round {round_no} of the {WEB_SEARCH} loop: {error.message}"
            error.args = (error.message,)
            error.raw = envelope_bytes(rounds, self.max_rounds)
            raise error from None

    def _round_error(
        self, round_no: int, exchange: HttpExchange, rounds: list[dict[str, Any]]
    ) -> UpstreamError:
        error = classify_kimi_http(
            exchange.status_code, exchange.headers, exchange.body, egress=exchange.egress
        )
        if round_no > 1:
            error.message = f"round {round_no} of the {WEB_SEARCH} loop: {error.message}"
            error.args = (error.message,)
            error.raw = envelope_bytes(rounds, self.max_rounds)
        return error

    # --- parsing ------------------------------------------------------------------------

    @classmethod
    def parse(
        cls, raw: bytes, *, content_type: str = "", sample_id: int | None = None
    ) -> NormalizedResult:
        envelope = _read_envelope(raw) if not content_type.startswith("text/") else None
        if envelope is None:
            return cls._parse_single_round(raw, content_type, sample_id)
        records = envelope.get("rounds")
        parsed = _Parsed(
            rounds=[
                _Round.from_record(record, position)
                for position, record in enumerate(records if isinstance(records, list) else [], 1)
                if isinstance(record, dict)
            ],
            max_rounds=envelope.get("max_rounds")
            if isinstance(envelope.get("max_rounds"), int)
            else None,
        )
        return cls._from_rounds(parsed, raw, ENVELOPE_MIME, sample_id)

    @classmethod
    def _parse_single_round(
        cls, raw: bytes, content_type: str, sample_id: int | None
    ) -> NormalizedResult:
        streamed = chat_format.is_sse(raw, content_type)
        mime = content_type or (chat_format.SSE_MIME if streamed else chat_format.JSON_MIME)
        round_ = _Round(1, 200, {"content-type": mime}, raw, None, None)
        round_.completion = chat_format.read_body(raw, content_type)
        result = cls._from_rounds(_Parsed(rounds=[round_]), raw, mime, sample_id)
        result.status_code = None  # a body captured on its own does not say
        return result

    @classmethod
    def _from_rounds(
        cls, parsed: _Parsed, raw: bytes, mime: str, sample_id: int | None
    ) -> NormalizedResult:
        if not parsed.rounds:
            message = "Kimi transcript holds no rounds"
            return failed(raw, mime, sample_id, error_dict(ErrorClass.PARSE_FAILED, message))
        last = parsed.rounds[-1]
        result = cls._last_round_result(parsed, last, raw, mime, sample_id)
        result.request_id = request_id_from(last.headers)
        result.status_code = last.status_code
        if result.upstream_id is None and last.completion is not None:
            result.upstream_id = last.completion.id
        if len(parsed.rounds) > 1:
            result.warnings.append(f"WEB_SEARCH_ROUNDS_{len(parsed.rounds)}")
        return result

    @classmethod
    def _last_round_result(
        cls, parsed: _Parsed, last: _Round, raw: bytes, mime: str, sample_id: int | None
    ) -> NormalizedResult:
        where = f"round {last.number}: " if len(parsed.rounds) > 1 else ""
        if last.transport_error is not None:
            error = dict(last.transport_error)
            error["message"] = where + str(error.get("message", "no response"))
            return failed(raw, mime, sample_id, error)
        if last.status_code is None or not 200 <= last.status_code < 600:
            what = f"{where}no usable response recorded (status {last.status_code})"
            return failed(raw, mime, sample_id, error_dict(ErrorClass.PARSE_FAILED, what))
        if 300 <= last.status_code < 400:  # a redirect we did not follow: an egress problem
            what = f"{where}unexpected redirect (HTTP {last.status_code})"
            return failed(raw, mime, sample_id, error_dict(ErrorClass.PARSE_FAILED, what))
        if not last.ok:
            failure = classify_kimi_http(last.status_code, last.headers, last.body)
            error = error_dict(failure.error_class, where + failure.message)
            error |= {"status_code": failure.status_code, "retry_after": failure.retry_after}
            return failed(raw, mime, sample_id, error)
        completion = last.completion
        if completion is None:
            what = f"{where}not a Kimi chat body (content-type {last.content_type!r})"
            return failed(raw, mime, sample_id, error_dict(ErrorClass.PARSE_FAILED, what))
        if last.asks_for_search():
            return cls._unfinished_loop(parsed, last, raw, mime, sample_id)
        result = chat_format.base_result(
            completion, raw=raw, mime=mime, sample_id=sample_id, classify=classify_kimi_code
        )
        if result.error is not None and where:
            result.error["message"] = where + result.error["message"]
        if last.interrupted and result.collection_state == "truncated":
            result.error = error_dict(
                ErrorClass.TRUNCATED, f"{where}stream cut: {last.interrupted}"
            )
        result.citations = citations_in_text(result.answer_text)
        if result.citations:
            result.warnings.append(CITATIONS_FROM_TEXT)
        return result

    @classmethod
    def _unfinished_loop(
        cls, parsed: _Parsed, last: _Round, raw: bytes, mime: str, sample_id: int | None
    ) -> NormalizedResult:
        assert last.completion is not None
        others = sorted({c.name for c in last.completion.tool_calls if c.name != WEB_SEARCH})
        if others:
            message = f"Kimi asked for tools that were not offered: {', '.join(others)}"
            error = error_dict(ErrorClass.UNSUPPORTED, message)
        elif parsed.max_rounds is not None and len(parsed.rounds) >= parsed.max_rounds:
            message = (
                f"the {WEB_SEARCH} loop did not finish within {parsed.max_rounds} rounds "
                "(the last round still asked for a search)"
            )
            error = error_dict(ErrorClass.UPSTREAM_FAILED, message)
        else:
            message = f"the transcript ends after round {last.number} asked for a search"
            error = error_dict(ErrorClass.UPSTREAM_FAILED, message)
        result = failed(raw, mime, sample_id, error)
        result.upstream_id = last.completion.id
        return result
