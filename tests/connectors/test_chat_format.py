"""The Chat Completions wire-format reader shared by OpenAI Chat, DeepSeek and Kimi, and the
adapters' `parse()` on arbitrary input."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors import chat_format
from connectors.adapters.deepseek import DeepSeekConnector
from connectors.adapters.kimi import KimiConnector
from connectors.adapters.openai_chat import OpenAIChatConnector


def _frame(delta: dict[str, Any], finish: str | None = None, **top: Any) -> str:
    payload = {"id": "c-1", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return "data: " + json.dumps(payload | top, ensure_ascii=False) + "\n\n"


def _read(text: str) -> chat_format.ChatCompletion:
    completion = chat_format.read_body(text.encode(), "text/event-stream")
    assert completion is not None
    return completion


def test_a_complete_stream_with_keepalives_reasoning_and_usage() -> None:
    text = (
        ": keep-alive\n\n"
        + _frame({"role": "assistant", "content": None, "reasoning_content": "think"})
        + ": keep-alive\n\n"
        + _frame({"content": "云 🚀", "reasoning_content": None}, obfuscation="x1")
        + _frame({}, "stop")
        + 'data: {"id": "c-1", "choices": [], "usage": {"total_tokens": 9}}\n\n'
        + "data: [DONE]\n\n"
    )
    completion = _read(text)
    assert completion.done and completion.finish_reason == "stop"
    assert (completion.content, completion.reasoning) == ("云 🚀", "think")
    assert completion.keepalives == 2 and completion.usage == {"total_tokens": 9}
    assert chat_format.outcome_problem(completion) == ("completed", None)


def test_tool_call_deltas_are_joined_by_index() -> None:
    text = (
        _frame({"tool_calls": [{"index": 0, "id": "t1", "type": "builtin_function",
                "function": {"name": "$web_search", "arguments": '{"search_'}}]})
        + _frame({"tool_calls": [{"index": 0, "function": {"arguments": 'id": "s"}'}}]})
        + _frame({}, "tool_calls")
        + "data: [DONE]\n\n"
    )  # fmt: skip
    completion = _read(text)
    [call] = completion.tool_calls
    assert (call.id, call.type, call.name) == ("t1", "builtin_function", "$web_search")
    assert call.arguments == '{"search_id": "s"}'
    assert call.to_message()["function"]["arguments"] == call.arguments
    state, error = chat_format.outcome_problem(completion)
    assert state == "failed" and error is not None and "no tools" in error["message"]
    assert chat_format.outcome_problem(completion, allow_tool_calls=True)[0] == "completed"


@pytest.mark.parametrize(
    ("tail", "state"),
    [
        ("", "truncated"),  # no [DONE]
        ("data: [DONE]", "completed"),  # [DONE] without its blank line: still said
        ('data: {"id": "c-1", "choi', "truncated"),  # a frame cut in half
    ],
)
def test_completion_requires_done(tail: str, state: str) -> None:
    completion = _read(_frame({"content": "Hello"}, "stop") + tail)
    assert chat_format.outcome_problem(completion)[0] == state


def test_frames_after_done_are_ignored_and_counted() -> None:
    completion = _read(
        _frame({"content": "A"}, "stop") + "data: [DONE]\n\n" + _frame({"content": "B"})
    )
    assert completion.content == "A" and completion.after_done == 1


@pytest.mark.parametrize(
    ("error", "error_class"),
    [
        ({"message": "boom", "type": "server_error", "code": "server_error"}, "transient"),
        ({"message": "slow down", "code": "rate_limit_exceeded"}, "rate_limited"),
        ("plain string error", "upstream_failed"),
    ],
)
def test_mid_stream_error_frames(error: Any, error_class: str) -> None:
    text = _frame({"content": "Par"}) + "data: " + json.dumps({"error": error}) + "\n\n"
    completion = _read(text)
    state, problem = chat_format.outcome_problem(completion)
    assert state == "failed" and problem is not None and problem["class"] == error_class


@pytest.mark.parametrize("reason", ["length", "content_filter"])
def test_finish_reasons_that_cut_the_answer_fail(reason: str) -> None:
    completion = _read(_frame({"content": "Half"}, reason) + "data: [DONE]\n\n")
    state, problem = chat_format.outcome_problem(completion)
    assert state == "failed" and problem is not None and reason in problem["message"]


def test_bad_frames_are_counted_not_fatal() -> None:
    text = "data: not json\n\n" + _frame({"content": "ok"}, "stop") + "data: [DONE]\n\n"
    result = chat_format.base_result(
        _read(text), raw=text.encode(), mime="text/event-stream", sample_id=None
    )
    assert result.collection_state == "completed" and result.warnings == ["BAD_STREAM_FRAMES"]


def test_json_bodies() -> None:
    body = {"id": "c-2", "object": "chat.completion", "choices": [{"index": 0,
            "finish_reason": "stop", "message": {"role": "assistant", "content": "Hi",
            "reasoning_content": "r"}}]}  # fmt: skip
    padded = b"\n\n" + json.dumps(body).encode()  # DeepSeek's keep-alive blank lines
    completion = chat_format.read_body(padded, "application/json")
    assert completion is not None and completion.done
    assert (completion.id, completion.content, completion.reasoning) == ("c-2", "Hi", "r")
    not_chat = chat_format.read_body(b'{"hello": 1}', "application/json")
    assert not_chat is not None
    state, problem = chat_format.outcome_problem(not_chat)
    assert state == "failed" and problem is not None and problem["class"] == "parse_failed"
    assert chat_format.read_body(b"<html>login</html>", "text/html") is None


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=400),
        st.text(max_size=400).map(str.encode),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=20),
            lambda inner: (
                st.lists(inner, max_size=4)
                | st.dictionaries(
                    st.sampled_from(
                        [
                            "object",
                            "rounds",
                            "round",
                            "body",
                            "body_base64",
                            "headers",
                            "status_code",
                            "error",
                            "choices",
                            "delta",
                            "max_rounds",
                        ]
                    ),
                    inner,
                    max_size=5,
                )
            ),
            max_leaves=20,
        ).map(lambda value: json.dumps({"object": "geo.kimi.rounds", "rounds": [value]}).encode()),
    )
)
def test_parse_never_raises_on_arbitrary_bytes(raw: bytes) -> None:
    for adapter in (OpenAIChatConnector, DeepSeekConnector, KimiConnector):
        result = adapter.parse(raw)
        assert result.collection_state in ("completed", "failed", "truncated")
        assert result.raw == raw
