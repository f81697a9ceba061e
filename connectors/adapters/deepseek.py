"""DeepSeek, the classic OpenAI-compatible chat API (docs/platforms.md §6).

The classic API has no search switch and returns no citations, so this connector offers
`no_search` and `deep_thinking` only; a run asking DeepSeek for `web_search` is rejected at plan
time. Thinking is always sent explicitly (`thinking: {"type": "enabled" | "disabled"}`), because
the default differs between model generations. In thinking mode the stream carries
`reasoning_content` deltas before the answer; the reasoning stays in the raw transcript and the
answer text is `content` alone.

Under load DeepSeek sends `: keep-alive` SSE comments (streams) or blank lines (JSON bodies)
before the first token; both are ignored. The stream is complete only on `data: [DONE]`.
Request id: the `x-ds-trace-id` response header. There is no Retry-After on 429.

Configuration (`ConnectorConfig.extra`), all optional:
    thinking_model    the model to use for deep_thinking (classic: "deepseek-reasoner");
                      unset: the configured model with thinking enabled
    regions           the regions accepted at plan time
    stream_deadline_seconds   bound on one streamed answer (default 900: DeepSeek closes a
                      connection whose inference has not started after 10 minutes)
"""

from __future__ import annotations

from typing import Any, ClassVar

from .. import chat_format
from ..base import Capabilities, NormalizedResult, SampleRequest
from ..direct import CN_VENDOR_REGIONS, DirectConnector, unparseable

CHAT_PATH = "/chat/completions"


class DeepSeekConnector(DirectConnector):
    platform: ClassVar[str] = "deepseek"
    default_base_url: ClassVar[str] = "https://api.deepseek.com"
    path: ClassVar[str] = CHAT_PATH
    # DeepSeek closes a connection whose inference has not started after 10 minutes.
    stream_deadline_seconds: ClassVar[float] = 900.0

    def capabilities(self) -> Capabilities:
        regions = self._configured_regions(CN_VENDOR_REGIONS)
        return self._capabilities({"no_search", "deep_thinking"}, regions=regions)

    def request_body(self, request: SampleRequest) -> dict[str, Any]:
        thinking = request.mode == "deep_thinking"
        model = request.model or self.config.model
        if thinking and self.config.extra.get("thinking_model"):
            model = str(self.config.extra["thinking_model"])
        return {
            "model": model,
            "messages": [{"role": "user", "content": request.question}],
            "stream": True,
            "stream_options": {"include_usage": True},
            "thinking": {"type": "enabled" if thinking else "disabled"},
        }

    @classmethod
    def parse(
        cls, raw: bytes, *, content_type: str = "", sample_id: int | None = None
    ) -> NormalizedResult:
        completion = chat_format.read_body(raw, content_type)
        if completion is None:
            return unparseable(raw, content_type, sample_id, "a DeepSeek chat body")
        streamed = chat_format.is_sse(raw, content_type)
        mime = content_type or (chat_format.SSE_MIME if streamed else chat_format.JSON_MIME)
        return chat_format.base_result(completion, raw=raw, mime=mime, sample_id=sample_id)
