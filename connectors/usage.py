"""Token usage of one upstream exchange, read from the raw response as stored.

Every direct model API reports usage somewhere in its body: a `usage` object (OpenAI chat and
Responses, Anthropic, DeepSeek, Kimi, Qwen, Doubao, Perplexity), Gemini's `usageMetadata`, or
Ollama's top-level `prompt_eval_count` / `eval_count`; streams repeat it per event (cumulative)
or split it (Anthropic: input at `message_start`, output at `message_delta`). Reading it from
the raw in one place keeps every adapter's parser unchanged and works on archived evidence too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

_INPUT_KEYS = ("prompt_tokens", "input_tokens", "promptTokenCount", "prompt_eval_count")
_OUTPUT_KEYS = ("completion_tokens", "output_tokens", "candidatesTokenCount", "eval_count")


@dataclass(frozen=True)
class Usage:
    input_tokens: int
    output_tokens: int


def extract_usage(raw: bytes) -> Usage | None:
    """The exchange's token usage (the largest count seen per side, since streamed counts are
    cumulative), or None when the body reports none."""
    seen_input: list[int] = []
    seen_output: list[int] = []
    for counts in _usage_objects(raw):
        seen_input += [v for k in _INPUT_KEYS if isinstance(v := counts.get(k), int)]
        seen_output += [v for k in _OUTPUT_KEYS if isinstance(v := counts.get(k), int)]
    if not seen_input and not seen_output:
        return None
    return Usage(max(seen_input, default=0), max(seen_output, default=0))


def _usage_objects(raw: bytes) -> Iterator[dict[str, Any]]:
    for payload in _json_payloads(raw):
        yield from _find_usage(payload)


def _json_payloads(raw: bytes) -> Iterator[Any]:
    """A JSON body, or each JSON line / SSE `data:` line of a stream; only those that can hold
    a usage key at all (`_may_hold_usage`), so a stream's many delta events are never decoded.
    A payload nested too deep for `json` is skipped like any other bad one."""
    text = raw.decode("utf-8", errors="replace")
    if not _may_hold_usage(text):
        return  # neither the body nor any of its lines can yield a usage object
    try:
        yield json.loads(text)
        return
    except (ValueError, RecursionError):
        pass
    # The same test per line: a stream has hundreds of lines and few hold usage.
    for line in filter(_may_hold_usage, text.splitlines()):
        line = line.strip().removeprefix("data:").strip()
        if line.startswith(("{", "[")):
            try:
                yield json.loads(line)
            except (ValueError, RecursionError):
                continue


def _may_hold_usage(text: str) -> bool:
    """Whether JSON `text` can have a key `_find_usage` looks for: every such key contains
    "usage" or "eval_count", written out or with its ASCII letters escaped (`\\u00XX`)."""
    return "usage" in text or "eval_count" in text or "\\u00" in text


def _find_usage(payload: Any, depth: int = 0) -> Iterator[dict[str, Any]]:
    if depth > 6:
        return
    if isinstance(payload, list):
        for item in payload:
            yield from _find_usage(item, depth + 1)
        return
    if not isinstance(payload, dict):
        return
    if "eval_count" in payload or "prompt_eval_count" in payload:  # Ollama, top level
        yield payload
    for key, value in payload.items():
        if key in ("usage", "usageMetadata") and isinstance(value, dict):
            yield value
        elif isinstance(value, dict | list):
            yield from _find_usage(value, depth + 1)
