"""The simulator validates requests as the vendor does: it knows every field the official SDK
can send (so an SDK-built request is never refused for a real field) and refuses a field the
vendor does not know, which the SDK then reports as a bad request and we classify as invalid."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx2
import openai
import pytest
from anthropic.types import message_create_params
from openai.types.chat import completion_create_params
from openai.types.responses import response_create_params

from connectors.base import ErrorClass
from connectors.errors import classify_http_error
from simulator import SimulatorHandle
from simulator.platforms.anthropic import MESSAGES_FIELDS
from simulator.platforms.openai_chat import CHAT_FIELDS
from simulator.platforms.openai_responses import RESPONSES_FIELDS

from .harness import Recorder, client_options


def declared(params: type) -> set[str]:
    return {name for cls in params.__mro__ for name in getattr(cls, "__annotations__", {})}


@pytest.mark.parametrize(
    ("known", "params"),
    [
        (RESPONSES_FIELDS, response_create_params.ResponseCreateParamsStreaming),
        (CHAT_FIELDS, completion_create_params.CompletionCreateParamsStreaming),
        (MESSAGES_FIELDS, message_create_params.MessageCreateParamsStreaming),
    ],
    ids=["openai-responses", "openai-chat", "anthropic-messages"],
)
def test_the_simulator_knows_every_field_the_sdk_can_send(known: Any, params: type) -> None:
    assert declared(params) - known == set()


def _openai(sim: SimulatorHandle, recorder: Recorder, platform: str) -> openai.OpenAI:
    return openai.OpenAI(**client_options(sim.url(platform) + "/v1", recorder))


def test_an_unknown_responses_field_is_a_bad_request(sim: SimulatorHandle) -> None:
    recorder = Recorder()
    with pytest.raises(openai.BadRequestError) as refused:
        _openai(sim, recorder, "openai").responses.create(
            model="gpt-5.1", input="Which CRM?", extra_body={"web_search": True}
        )
    assert refused.value.code == "unknown_parameter" and refused.value.param == "web_search"
    _assert_invalid(recorder)


def test_an_unknown_chat_field_is_a_bad_request(sim: SimulatorHandle) -> None:
    recorder = Recorder()
    with pytest.raises(openai.BadRequestError) as refused:
        _openai(sim, recorder, "openai_chat").chat.completions.create(
            model="gpt-5.1",
            messages=[{"role": "user", "content": "Which CRM?"}],
            extra_body={"enable_search": True},
        )
    assert refused.value.code == "unknown_parameter"
    _assert_invalid(recorder)


def test_an_unknown_messages_field_is_a_bad_request(sim: SimulatorHandle) -> None:
    recorder = Recorder()
    client = anthropic.Anthropic(**client_options(sim.url("anthropic"), recorder, httpx2))
    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(
            model="claude-sonnet-4-6",
            max_tokens=64,
            messages=[{"role": "user", "content": "Which CRM?"}],
            extra_body={"web_search": True},
        )
    assert "web_search: Extra inputs are not permitted" in str(refused.value)
    _assert_invalid(recorder)


def _assert_invalid(recorder: Recorder) -> None:
    (exchange,) = recorder.exchanges
    error = classify_http_error(exchange.status, exchange.headers, exchange.body)
    assert error.error_class is ErrorClass.INVALID
