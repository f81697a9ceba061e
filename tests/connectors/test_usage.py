"""Token usage read from raw bodies (connectors/usage.py): found in the same places for every
platform's recorded fixtures, and by the same rules for the shapes around them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from connectors.usage import Usage, extract_usage

FIXTURES = Path(__file__).parent / "fixtures"

# What each recorded body bills: pinned so a faster reader cannot find less, or more.
EXPECTED: dict[str, tuple[int, int] | None] = {
    "anthropic/nonstream.json": (24, 84),
    "anthropic/success.sse": (24, 33),  # input at message_start, output at message_delta
    "anthropic/truncated.sse": (24, 1),
    "collector/result.json": None,
    "chatgpt_web/failed.json": None,  # a vendor task: the vendor states a cost, no tokens
    "chatgpt_web/task_get.json": None,
    "gemini_web/failed.json": None,
    "gemini_web/task_get.json": None,
    "google_ai_mode/failed.json": None,
    "google_ai_mode/task_get.json": None,
    "google_ai_overview/failed.json": None,
    "google_ai_overview/task_get.json": None,
    # Bright Data's records (a vendor's, one level deeper: fixtures/brightdata/<surface>/): no
    # tokens, and no cost stated either.
    "brightdata/chatgpt_web/record.json": None,
    "brightdata/copilot_web/record.json": None,
    "brightdata/gemini_web/record.json": None,
    "brightdata/google_ai_mode/record.json": None,
    "brightdata/perplexity_web/errored.json": None,
    "brightdata/perplexity_web/record.json": None,
    # DataForSEO's LLM Responses (fixtures/dataforseo_llm_responses/<platform>/): the result's
    # `input_tokens` / `output_tokens` are not usage to price: the task's stated `cost`
    # already includes the model's `money_spent` (read as usage, it would be billed twice).
    "dataforseo_llm_responses/anthropic/live.json": None,
    "dataforseo_llm_responses/gemini/live.json": None,
    "dataforseo_llm_responses/openai/live.json": None,
    "dataforseo_llm_responses/perplexity/live.json": None,
    "deepseek/nonstream.json": (12, 81),
    "deepseek/thinking.sse": (16, 128),
    "deepseek/truncated.sse": None,
    "doubao/bots_success.sse": (40, 174),
    "doubao/nonstream.json": (40, 183),
    "doubao/success.sse": (40, 64),
    "doubao/truncated.sse": None,
    "gemini/nonstream.json": (9, 87),
    "gemini/success.sse": (9, 34),
    "gemini/truncated.sse": (9, 0),
    "kimi/round_limit.json": None,
    "kimi/rounds.json": None,
    "kimi/truncated.json": None,
    "ollama/nonstream.json": (26, 118),
    "ollama/success.ndjson": (26, 117),
    "ollama/truncated.ndjson": None,
    "openai/success.sse": (20, 28),
    "openai/truncated.sse": None,
    "openai_chat/nonstream.json": (12, 85),
    "openai_chat/success.sse": (11, 33),
    "openai_chat/truncated.sse": None,
    "perplexity/nonstream.json": (12, 86),
    "perplexity/success.sse": (12, 36),
    "perplexity/truncated.sse": None,
    "qwen/nonstream.json": (31, 188),
    "qwen/success.sse": (31, 6),
    "qwen/truncated.sse": (31, 6),
}


def test_every_recorded_body_is_pinned() -> None:
    recorded = {
        path.relative_to(FIXTURES).as_posix()
        for path in FIXTURES.glob("**/*")
        if path.is_file() and not path.name.endswith(".expected.json")
    }
    assert recorded == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_bodies_bill_what_they_always_did(name: str) -> None:
    expected = EXPECTED[name]
    assert extract_usage((FIXTURES / name).read_bytes()) == (
        None if expected is None else Usage(*expected)
    )


def sse(*payloads: object, event: str = "message") -> bytes:
    return b"".join(
        f"event: {event}\ndata: {json.dumps(payload)}\n\n".encode() for payload in payloads
    )


def test_streamed_counts_are_cumulative_and_the_largest_wins() -> None:
    body = sse(
        {"type": "delta", "delta": "no counts here"},
        {"usage": {"prompt_tokens": 5, "completion_tokens": 1}},
        {"usage": {"prompt_tokens": 5, "completion_tokens": 9}},
        {"usage": {"prompt_tokens": 4, "completion_tokens": 3}},
    )
    assert extract_usage(body) == Usage(5, 9)


def test_usage_nested_in_a_response_object_and_under_every_known_name() -> None:
    responses = sse({"type": "response.completed", "response": {"usage": {"input_tokens": 7}}})
    assert extract_usage(responses) == Usage(7, 0)
    gemini = b'data: {"usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 4}}\r\n\r\n'
    assert extract_usage(gemini) == Usage(3, 4)
    ollama = b'{"done": false}\n{"done": true, "prompt_eval_count": 2, "eval_count": 6}\n'
    assert extract_usage(ollama) == Usage(2, 6)
    in_list = json.dumps([{"x": [{"usage": {"output_tokens": 8}}]}]).encode()
    assert extract_usage(in_list) == Usage(0, 8)


def test_keys_written_with_escapes_are_found() -> None:
    escaped = b'data: {"\\u0075sage": {"input_tokens": 3, "output_\\u0074okens": 4}}\n\n'
    assert extract_usage(escaped) == Usage(3, 4)
    ollama = b'{"done": true, "\\u0065val_count": 6}'
    assert extract_usage(ollama) == Usage(0, 6)


def test_what_is_not_usage() -> None:
    assert extract_usage(b"") is None
    assert extract_usage(b"<html>usage</html>") is None
    assert extract_usage(sse({"usage": None}, {"usage": [1, 2]}, {"text": "usage: 5"})) is None
    assert extract_usage(sse({"usage": {"input_tokens": "12"}})) is None  # not an int
    too_deep: dict[str, object] = {"usage": {"input_tokens": 1}}
    for _ in range(7):
        too_deep = {"x": too_deep}
    assert extract_usage(json.dumps(too_deep).encode()) is None  # beyond depth 6
    assert extract_usage(json.dumps({"x": too_deep["x"]}).encode()) is None
    shallower = too_deep["x"]
    assert isinstance(shallower, dict)
    assert extract_usage(json.dumps(shallower).encode()) == Usage(1, 0)


def test_bad_lines_are_skipped_and_hostile_nesting_is_no_crash() -> None:
    body = b"data: {not json usage}\n\n" + sse({"usage": {"output_tokens": 2}})
    assert extract_usage(body) == Usage(0, 2)
    deep = b"[" * 100_000 + b"]" * 100_000
    assert extract_usage(deep) is None
    assert extract_usage(b'{"usage": ' + deep + b"}") is None
    assert extract_usage(b"data: " + deep + b"\n\n" + sse({"usage": {"input_tokens": 1}})) == (
        Usage(1, 0)
    )
