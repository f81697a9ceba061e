"""OpenAI Chat Completions, and any OpenAI-compatible endpoint by base URL (docs/platforms.md
§2).

Search on this surface is a property of the model: the search models (`gpt-4o-search-preview`,
`gpt-4o-mini-search-preview`, `gpt-5-search-api`, ...) search on every request and take
`web_search_options`; other models refuse that option. So the modes this connector offers
follow from the configured model, and a run asking for the other one is rejected at plan time.

Submit streams (`stream: true`) and keeps the SSE transcript byte for byte. Citations arrive as
`url_citation` annotations with character offsets into the content; in a stream they come in a
late delta that may carry no text at all, which is why the annotations are read from every delta.
The stream is complete only on `data: [DONE]`.

Configuration (`ConnectorConfig.extra`), all optional, for other OpenAI-compatible endpoints:
    chat_path         the path to POST to; default derived from the base URL (see `chat_path`)
    modes             the modes this endpoint offers, e.g. ["no_search"]
    regions           the regions accepted at plan time
    stream            False: ask for one JSON body instead of a stream
    include_usage     False: do not send `stream_options.include_usage`
    extra_body        a dict merged into every request body (vendor switches)
    stream_deadline_seconds   bound on one streamed answer (default 600)
"""

from __future__ import annotations

import re
from typing import Any, ClassVar
from urllib.parse import urlsplit

from .. import chat_format
from ..base import Capabilities, Citation, NormalizedResult, SampleRequest
from ..citations import CitationList
from ..direct import REGIONS, DirectConnector, unparseable
from ..transport import header_safe

DEEP_THINKING_EFFORT = "high"
# The last path segment of a base URL that already names the API version: /v1, /v3, /v1beta,
# /api/v1, /compatible-mode/v1, /v1beta/openai.
_VERSIONED = re.compile(r"/(v\d+[a-z0-9]*|openai)$")


def is_search_model(model: str | None) -> bool:
    return bool(model) and "search" in str(model).lower()


def chat_path(base_url: str, configured: str | None = None) -> str:
    """Where Chat Completions live under a base URL.

    `https://api.openai.com` -> `/v1/chat/completions`; a base that already ends in a version
    segment (`https://openrouter.ai/api/v1`, `.../compatible-mode/v1`, `.../api/v3`) ->
    `chat/completions` below it. Anything else: set `chat_path` in the configuration."""
    if configured:
        return configured
    path = urlsplit(base_url).path.rstrip("/")
    if _VERSIONED.search(path):
        return "chat/completions"
    return "/v1/chat/completions"


def citations_from(completion: chat_format.ChatCompletion) -> list[Citation]:
    """url_citation annotations, both the nested shape (`{"url_citation": {...}}`) OpenAI sends
    and the flat one (`{"url": ...}`) some compatible servers send."""
    found = CitationList(len(completion.content))
    seen: set[tuple[str, int | None, int | None]] = set()
    for annotation in completion.annotations:
        if annotation.get("type", "url_citation") != "url_citation":
            continue
        nested = annotation.get("url_citation")
        fields = nested if isinstance(nested, dict) else annotation
        url, start, end = fields.get("url"), fields.get("start_index"), fields.get("end_index")
        if not isinstance(url, str) or not url:
            continue
        start = start if isinstance(start, int) else None
        end = end if isinstance(end, int) else None
        if (url, start, end) in seen:  # a server repeating its annotations in two deltas
            continue
        seen.add((url, start, end))
        found.add(
            url,
            title=fields.get("title") if isinstance(fields.get("title"), str) else None,
            start=start,
            end=end,
        )
    return found.items


class OpenAIChatConnector(DirectConnector):
    platform: ClassVar[str] = "openai_chat"
    default_base_url: ClassVar[str] = "https://api.openai.com"

    def modes(self) -> frozenset[str]:
        configured = self.config.extra.get("modes")
        if configured:
            return frozenset(str(mode) for mode in configured)
        return frozenset({"web_search"} if is_search_model(self.config.model) else {"no_search"})

    def capabilities(self) -> Capabilities:
        return self._capabilities(self.modes(), regions=self._configured_regions(REGIONS))

    @property
    def streaming(self) -> bool:
        return bool(self.config.extra.get("stream", True))

    def request_body(self, request: SampleRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": request.model or self.config.model,
            "messages": [{"role": "user", "content": request.question}],
        }
        if self.streaming:
            body["stream"] = True
            if self.config.extra.get("include_usage", True):
                body["stream_options"] = {"include_usage": True}
        if request.mode == "web_search":
            body["web_search_options"] = {
                "user_location": {
                    "type": "approximate",
                    "approximate": {"country": request.region.upper()},
                }
            }
        elif request.mode == "deep_thinking":
            body["reasoning_effort"] = DEEP_THINKING_EFFORT
        extra_body = self.config.extra.get("extra_body")
        if isinstance(extra_body, dict):
            body |= extra_body
        return body

    def request_path(self, request: SampleRequest) -> str:
        return chat_path(self.config.base_url, self.config.extra.get("chat_path"))

    def request_headers(self, request: SampleRequest) -> dict[str, str]:
        headers = {
            "Accept": chat_format.SSE_MIME if self.streaming else chat_format.JSON_MIME,
            # Not an idempotency key (OpenAI has none); it lets support find the call.
            "X-Client-Request-Id": header_safe(request.idempotency_key),
        }
        if self.config.api_key:  # local OpenAI-compatible servers often take none
            headers["Authorization"] = f"Bearer {self.config.api_key}"
        return headers

    @classmethod
    def parse(
        cls, raw: bytes, *, content_type: str = "", sample_id: int | None = None
    ) -> NormalizedResult:
        completion = chat_format.read_body(raw, content_type)
        streamed = chat_format.is_sse(raw, content_type)
        mime = content_type or (chat_format.SSE_MIME if streamed else chat_format.JSON_MIME)
        if completion is None:
            return unparseable(raw, content_type, sample_id, "a Chat Completions body")
        result = chat_format.base_result(completion, raw=raw, mime=mime, sample_id=sample_id)
        result.citations = citations_from(completion)
        return result
