"""The one HTTP helper adapters use: send a request, keep the response bytes as received.

Why a helper at all: every adapter must (a) capture raw bytes exactly for evidence, streamed
or not, (b) tell "never sent" (safe to retry) from "sent, no answer" (verify first), (c)
alternate egress paths between attempts and record which one was used, and (d) never leak
the API key into an error, a log line or stored evidence. Request and response *shapes* stay
in the adapters; they share no request code beyond this.
"""

from __future__ import annotations

import hashlib
import http.cookiejar
import json
import math
import threading
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import requests
import urllib3
from requests.structures import CaseInsensitiveDict

from .base import ConnectorConfig, ErrorClass, UpstreamError
from .redaction import redact

DIRECT = "direct"
CHUNK_SIZE = 16 * 1024


@dataclass(frozen=True)
class HttpExchange:
    """One response as received. `interrupted` is set when the status and headers arrived but
    the body stopped early (read timeout or connection loss mid-stream): the upstream did
    answer, and `body` holds every byte that came before the cut. For a streamed answer the
    status says it was accepted; a batch submit says which tasks it took in the body, so a cut
    one leaves their acceptance unknown (`submit_answer_cut`)."""

    status_code: int
    headers: dict[str, str]  # lowercased names
    body: bytes
    egress: str
    elapsed_seconds: float
    interrupted: str | None = None

    def error(self, error_class: ErrorClass, message: str) -> UpstreamError:
        """An error about this response, carrying its status, body and egress."""
        return UpstreamError(
            error_class, message, status_code=self.status_code, raw=self.body, egress=self.egress
        )

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    @property
    def ok(self) -> bool:
        return 200 <= self.status_code < 300


def choose_egress(proxies: tuple[str | None, ...], attempt_no: int) -> str | None:
    """Attempt 1 takes the first path, attempt 2 the next, and so on round the list."""
    if not proxies:
        return None
    return proxies[(max(attempt_no, 1) - 1) % len(proxies)]


def egress_label(proxy: str | None) -> str:
    """How an egress path is recorded: "direct" or the proxy URL without credentials."""
    if proxy is None:
        return DIRECT
    parts = urlsplit(proxy)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def header_safe(value: str, *, max_length: int = 128) -> str:
    """`value` when it can travel as an HTTP header as is; otherwise a stable digest of it, so
    the same key always becomes the same header (idempotency keys stay idempotent)."""
    printable = value.isascii() and value.isprintable() and 0 < len(value) <= max_length
    return value if printable else "sha256-" + hashlib.sha256(value.encode()).hexdigest()[:48]


def submit_answer_cut(exchange: HttpExchange) -> UpstreamError | None:
    """A submit whose answer arrived in part (status and headers, then the body cut in
    transit): the upstream may have taken the tasks, so their acceptance is unknown and is
    verified by key, not an answer that failed to parse (which is never asked again). None
    when the answer came whole, or was a refusal."""
    if exchange.interrupted is None or exchange.status_code >= 400:
        return None
    return exchange.error(
        ErrorClass.ACCEPTANCE_UNKNOWN, f"sent, answer cut: {exchange.interrupted}"
    )


def _failed_before_sending(exc: BaseException) -> bool:
    """True when the connection was never established, so the upstream cannot have seen the
    request: refused, unresolvable, connect timeout, or the proxy itself unreachable."""
    if isinstance(exc, requests.exceptions.ConnectTimeout | requests.exceptions.ProxyError):
        return True
    seen: set[int] = set()
    stack: list[BaseException] = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, urllib3.exceptions.NewConnectionError | ConnectionRefusedError):
            return True
        nested = [getattr(current, "reason", None), current.__cause__, current.__context__]
        nested += [arg for arg in current.args if isinstance(arg, BaseException)]
        stack.extend(item for item in nested if isinstance(item, BaseException))
    return False


class BoundedDecoder:
    """Content-Encoding undone chunk by chunk, never producing more than asked for: a 300 KB
    gzip body that inflates to 300 MB costs at most the cap in memory, not the 300 MB."""

    def __init__(self, content_encoding: str) -> None:
        encoding = content_encoding.strip().lower()
        wbits = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS}.get(encoding)
        if encoding == "deflate":
            wbits = zlib.MAX_WBITS
        self._inflate = zlib.decompressobj(wbits) if wbits else None

    def decode(self, chunk: bytes, *, room: int) -> tuple[bytes, bool]:
        """At most `room` decoded bytes of `chunk`, and whether there was more than that."""
        if self._inflate is None:
            return chunk[:room], len(chunk) > room
        decoded = self._inflate.decompress(chunk, room + 1)
        return decoded[:room], len(decoded) > room


_per_thread = threading.local()


def thread_session() -> requests.Session:
    """One HTTP session per thread, shared by the connectors built on it: its pooled
    connections stay open from one step to the next (a session per connector meant a new TCP
    connection per request). Cookies are refused, so nothing an answer sets travels on."""
    session: requests.Session | None = getattr(_per_thread, "session", None)
    if session is None:
        session = requests.Session()
        session.cookies.set_policy(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
        _per_thread.session = session
    return session


class HttpTransport:
    """Sends on the thread's `requests.Session` (`thread_session`). Environment proxy
    variables are ignored (`trust_env = False`): the egress path is exactly what the
    configuration says."""

    def __init__(self, config: ConnectorConfig, session: requests.Session | None = None) -> None:
        self.config = config
        self.session = session or thread_session()
        self.session.trust_env = False

    def url(self, path: str) -> str:
        return f"{self.config.base_url.rstrip('/')}/{path.lstrip('/')}"

    def request(
        self,
        method: str,
        path: str,
        *,
        attempt_no: int = 1,
        headers: Mapping[str, str] | None = None,
        json_body: Any = None,
        params: Mapping[str, str] | None = None,
        stream: bool = False,
        deadline_seconds: float | None = None,
    ) -> HttpExchange:
        """Send and read the whole response. Raises UpstreamError UNREACHABLE when the request
        was never sent, ACCEPTANCE_UNKNOWN when it was sent and nothing came back."""
        proxy = choose_egress(self.config.egress_proxies, attempt_no)
        egress = egress_label(proxy)
        data = None if json_body is None else json.dumps(json_body, ensure_ascii=False).encode()
        # Only encodings BoundedDecoder can undo within the cap.
        send_headers = {"Accept-Encoding": "gzip, deflate"}
        if data is not None:
            send_headers["Content-Type"] = "application/json"
        send_headers.update(headers or {})
        started = time.monotonic()
        session = self.session
        try:
            # The request is prepared and handed to the session's adapter directly: what
            # `Session.request` adds around that is cookie merging and extraction (refused
            # anyway), environment settings (`trust_env` is off), hooks and redirects (none),
            # about a third of the HTTP client's CPU per request (docs/decisions.md, "The
            # transport sends through the session's adapter"). Headers, proxies, TLS settings
            # and timeouts are the session's and ours, as before.
            merged = CaseInsensitiveDict(session.headers)
            merged.update(send_headers)
            for name in [name for name, value in merged.items() if value is None]:
                del merged[name]  # as the session's merge: None removes a default header
            prepared = requests.Request(
                method, self.url(path), params=params, data=data, headers=merged
            ).prepare()
            response = session.get_adapter(prepared.url or "").send(
                prepared,
                stream=True,  # always read ourselves, so partial bodies survive a cut
                timeout=(self.config.connect_timeout_seconds, self.config.timeout_seconds),
                verify=True if session.verify is None else session.verify,
                cert=session.cert,
                proxies={"http": proxy, "https": proxy} if proxy else {},
            )
        except requests.RequestException as exc:
            raise self._send_error(exc, egress) from None
        with response:
            body, interrupted = self._read_body(response, started, deadline_seconds)
        return HttpExchange(
            status_code=response.status_code,
            headers={key.lower(): value for key, value in response.headers.items()},
            body=body,
            egress=egress,
            elapsed_seconds=time.monotonic() - started,
            interrupted=interrupted,
        )

    def _read_body(
        self, response: requests.Response, started: float, deadline_seconds: float | None
    ) -> tuple[bytes, str | None]:
        """The decoded body, cut at the size cap or the deadline, with the reason of a cut."""
        limit = self.config.max_response_bytes
        deadline = min(deadline_seconds or math.inf, self.config.max_response_seconds)
        decoder = BoundedDecoder(response.headers.get("content-encoding", ""))
        body = bytearray()
        try:
            for chunk in response.raw.stream(CHUNK_SIZE, decode_content=False):
                decoded, over = decoder.decode(chunk, room=limit - len(body))
                body += decoded
                if over:
                    return bytes(body), f"response body over the {limit}-byte cap"
                if time.monotonic() - started > deadline:
                    return bytes(body), f"stream exceeded {deadline:.0f}s deadline"
        except zlib.error as exc:
            return bytes(body), f"content-encoding could not be decoded: {exc}"
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            return bytes(body), self._describe(exc)
        return bytes(body), None

    def _describe(self, exc: BaseException) -> str:
        text = f"{type(exc).__name__}: {exc}"[:300]
        return redact(text, (self.config.api_key,))

    def _send_error(self, exc: requests.RequestException, egress: str) -> UpstreamError:
        if _failed_before_sending(exc):
            return UpstreamError(
                ErrorClass.UNREACHABLE,
                f"not sent: {self._describe(exc)}",
                egress=egress,
            )
        return UpstreamError(
            ErrorClass.ACCEPTANCE_UNKNOWN,
            f"sent, no response: {self._describe(exc)}",
            egress=egress,
        )
