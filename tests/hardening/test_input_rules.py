"""The one set of input rules (sampling/inputs.py) and the parsers of upstream bytes, fed
hostile and arbitrary input: every value is either accepted unchanged or refused with an
InputError naming the field; parsers never raise anything but their documented refusal."""

from __future__ import annotations

import json
import unicodedata
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connectors import chat_format, safejson, streams
from connectors.adapters.anthropic import AnthropicConnector
from connectors.adapters.collector import parse_callback, verify_callback_signature
from connectors.adapters.gemini import GeminiConnector
from connectors.adapters.kimi import KimiConnector
from connectors.adapters.ollama import OllamaConnector
from connectors.adapters.openai_chat import OpenAIChatConnector
from connectors.adapters.openai_responses import OpenAIResponsesConnector
from connectors.base import (
    ConnectorConfig,
    ErrorClass,
    NormalizedResult,
    SubmitOutcome,
    UpstreamError,
)
from connectors.errors import classify_http_error, error_dict
from sampling import inputs

DEEP = 100_000
HOSTILE_NAMES = {
    "NUL": "Acme\x00",
    "control": "Ac\x07me",
    "bidi override": "Acme \u202eevil",
    "bidi isolate": "\u2066Acme",
    "zero-width only": "\u200b\u200c\u200d\ufeff",
    "blank": "   ",
}


# --- names, ids, slugs ------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(HOSTILE_NAMES))
def test_hostile_names_are_refused_with_the_field_named(case: str) -> None:
    with pytest.raises(inputs.InputError, match=r"^brand\.name: ") as caught:
        inputs.text(HOSTILE_NAMES[case], "brand.name")
    assert caught.value.field == "brand.name"


@pytest.mark.parametrize(
    "name",
    [
        "👩\u200d💻 Acme",  # ZWJ inside an emoji sequence
        "艾克米\u200d云",  # ZWJ between CJK characters
        "क्\u200dष",  # ZWJ inside Devanagari
        "Acme Cloud (US)",
        "=1+1 Beta",  # a formula-looking name is a name; exports make it inert
    ],
)
def test_joiners_inside_real_text_are_allowed(name: str) -> None:
    assert inputs.text(name, "brand.name") == name


@pytest.mark.parametrize(
    "value",
    ["../../etc", "a/b", "Acme", "acme corp", "-acme", "acme\x00", "ａｃｍｅ", "", "a" * 65],
)
def test_tenant_slugs_refuse_paths_and_anything_but_lowercase_ascii(value: str) -> None:
    with pytest.raises(inputs.InputError, match=r"^tenant: "):
        inputs.slug(value, "tenant")


@pytest.mark.parametrize(
    "value",
    ["t" * 201, "tsk\x001", "tsk 1", "tsk\u200b1", "tsk\u202e1", "", "\ufeff"],
)
def test_ids_refuse_length_space_control_and_invisible_characters(value: str) -> None:
    with pytest.raises(inputs.InputError, match=r"^task_id: "):
        inputs.identifier(value, "task_id")


@pytest.mark.parametrize("value", [{"a": 1}, ["x"], 7, None, b"tsk"])
def test_ids_must_be_strings(value: Any) -> None:
    with pytest.raises(inputs.InputError, match="expected a string"):
        inputs.identifier(value, "task_id")


@settings(deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_accepted_unchanged_or_refused_by_field(value: str) -> None:
    for rule in (inputs.text, inputs.identifier, inputs.slug):
        try:
            assert rule(value, "f") == value
        except inputs.InputError as error:
            assert str(error).startswith("f: ")
            continue
        assert "\x00" not in value
        assert not any(c in value for c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2069")


@settings(deadline=None)
@given(st.text(min_size=1, max_size=50))
def test_accepted_names_always_show_something(value: str) -> None:
    try:
        inputs.text(value, "name")
    except inputs.InputError:
        return
    assert any(unicodedata.category(c)[0] not in "CZ" for c in value)


# --- amounts, currencies, domains --------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["99999999999999999999", "-500", "1_000", "٣٠٠", "３００", "1.5", "1e3", " ", "0x10", "+5"],
)
def test_statement_amounts_are_ascii_integers_within_int64(value: str) -> None:
    with pytest.raises(inputs.InputError, match=r"^amount: "):
        inputs.amount(value, "amount", minimum=0)


@settings(deadline=None)
@given(st.integers(min_value=0, max_value=inputs.INT64_MAX))
def test_every_int64_amount_round_trips(value: int) -> None:
    assert inputs.amount(str(value), "amount", minimum=0) == value


@settings(deadline=None)
@given(
    st.one_of(
        st.integers(min_value=inputs.INT64_MAX + 1), st.integers(max_value=inputs.INT64_MIN - 1)
    )
)
def test_amounts_outside_int64_are_refused(value: int) -> None:
    with pytest.raises(inputs.InputError):
        inputs.amount(str(value), "amount")


@pytest.mark.parametrize("value", ["ＵＳＤ", "usd", "US", "USDT", "U$D", "", "ÜSD"])
def test_currencies_are_three_ascii_capitals(value: str) -> None:
    with pytest.raises(inputs.InputError, match=r"^currency: "):
        inputs.currency(value, "currency")


@pytest.mark.parametrize(
    "value",
    [
        "javascript:alert(1)",
        "acme.com/pricing",
        "https://acme.com",
        "user@acme.com",
        "acme.com:443",
        "acme",
        "-acme.com",
        "ac me.com",
        "acme..com",
        "a" * 64 + ".com",
        "acme.com\x00",
    ],
)
def test_domains_must_be_hostnames(value: str) -> None:
    with pytest.raises(inputs.InputError, match=r"^brand.domains\[0\]: "):
        inputs.domain(value, "brand.domains[0]")


@pytest.mark.parametrize("value", ["Acme.COM", "docs.acme.co.uk", "例子.中国", "acme.com."])
def test_real_hostnames_are_accepted_lowercased(value: str) -> None:
    assert inputs.domain(value, "d") == value.lower().rstrip(".")


# --- JSON nesting --------------------------------------------------------------------------------


@pytest.mark.parametrize("opener", ["[", '{"a":'])
def test_deep_json_is_a_value_error_not_a_recursion_error(opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    with pytest.raises(safejson.JsonTooDeep):
        safejson.loads(opener * DEEP + "1" + closer * DEEP)
    with pytest.raises(safejson.JsonTooDeep):  # deep enough for json, too deep for us
        safejson.loads(opener * 100 + "1" + closer * 100)
    assert safejson.loads(opener * 10 + "1" + closer * 10)


@settings(deadline=None)
@given(
    st.recursive(st.none() | st.integers(), lambda c: st.lists(c) | st.dictionaries(st.text(), c))
)
def test_depth_check_agrees_with_the_structure(value: Any) -> None:
    def depth(v: Any) -> int:
        children = v.values() if isinstance(v, dict) else v if isinstance(v, list) else None
        return 0 if children is None else 1 + max((depth(c) for c in children), default=0)

    assert safejson.depth_exceeds(value, 3) == (depth(value) > 3)


def _deep_frame() -> bytes:
    return b"data: " + b"[" * DEEP + b"]" * DEEP + b"\n\n"


def test_deep_sse_frames_and_ndjson_lines_are_bad_frames() -> None:
    transcript = streams.parse_sse(_deep_frame() + b"data: [DONE]\n\n")
    assert transcript.events[0].json_object() is None
    with pytest.raises(ValueError, match="deeper"):
        transcript.events[0].json()
    ndjson = streams.parse_ndjson(b"[" * DEEP + b"]" * DEEP + b'\n{"done": true}\n')
    assert ndjson.objects == [{"done": True}] and len(ndjson.invalid_lines) == 1
    assert chat_format.read_body(b"[" * DEEP + b"]" * DEEP, "application/json") is None


PARSERS = [
    OpenAIChatConnector.parse,
    OpenAIResponsesConnector.parse,
    AnthropicConnector.parse,
    GeminiConnector.parse,
    OllamaConnector.parse,
    KimiConnector.parse,
]
HOSTILE_BODIES = [
    b"[" * DEEP,
    b"[" * DEEP + b"]" * DEEP,
    _deep_frame(),
    b'{"choices": [{"message": {"content": "\x00\xff"}}]}',
    b"\xff\xfe\x00garbage",
    b"data: {}\n\n" * 1000,
    b"",
]


@pytest.mark.parametrize("parse", PARSERS, ids=lambda p: p.__qualname__.split(".")[0])
@pytest.mark.parametrize("body", HOSTILE_BODIES, ids=range(len(HOSTILE_BODIES)))
def test_adapters_parse_hostile_bodies_into_a_result(parse: Any, body: bytes) -> None:
    for content_type in ("application/json", "text/event-stream", "application/x-ndjson", ""):
        result = parse(body, content_type=content_type)
        assert isinstance(result, NormalizedResult)
        assert result.collection_state in {"completed", "failed", "truncated"}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2000))
@pytest.mark.parametrize("parse", PARSERS, ids=lambda p: p.__qualname__.split(".")[0])
def test_adapters_parse_arbitrary_bytes_into_a_result(parse: Any, body: bytes) -> None:
    assert isinstance(parse(body, content_type="text/event-stream"), NormalizedResult)
    assert isinstance(parse(body, content_type="application/json"), NormalizedResult)


# --- callbacks at the connector --------------------------------------------------------------


@pytest.mark.parametrize(
    "header", ["t=1,v1=\xff\xfe", "t=\xff,v1=ab", "v1=", "", "t=99999999999999999999999,v1=a"]
)
def test_malformed_signatures_are_false_not_errors(header: str) -> None:
    assert verify_callback_signature(b"{}", header, "secret") is False


@pytest.mark.parametrize(
    "body",
    [
        {"task_id": {"nested": 1}},
        {"task_id": ["tsk"]},
        {"task_id": "tsk", "delivery_id": 5},
        {"task_id": "tsk", "status": {"x": 1}},
    ],
)
def test_callback_fields_must_be_strings(body: dict[str, Any]) -> None:
    with pytest.raises(UpstreamError, match="must be a string"):
        parse_callback(json.dumps(body).encode())


def test_a_deep_callback_body_is_not_a_task_event() -> None:
    with pytest.raises(UpstreamError, match="not a task event"):
        parse_callback(b'{"task_id": "t", "x": ' + b"[" * DEEP + b"]" * DEEP + b"}")


# --- upstream values and secrets ---------------------------------------------------------------


def _result(**overrides: Any) -> NormalizedResult:
    fields: dict[str, Any] = {
        "sample_id": 1,
        "upstream_id": "resp_1",
        "collection_state": "completed",
        "evidence_state": "stored",
        "answer_text": "ok",
        "raw": b"{}",
        "raw_mime": "application/json",
    }
    return NormalizedResult(**(fields | overrides))


def test_upstream_values_are_fit_to_their_columns() -> None:
    result = inputs.upstream_result(
        _result(
            upstream_id="x" * 500,
            request_id="r\x00",
            raw_mime="text/html; " + "a=b; " * 100,
            cost=10**30,
            cost_currency="dollars",
        )
    )
    assert result.upstream_id is not None and result.upstream_id.startswith("sha256:")
    assert len(result.upstream_id) <= 200
    assert result.request_id is None
    assert result.raw_mime == "text/html"
    assert (result.cost, result.cost_currency) == (None, None)
    assert any(w.startswith("UPSTREAM_COST_INVALID") for w in result.warnings)


def test_a_task_id_that_cannot_be_stored_is_refused_with_the_reason() -> None:
    with pytest.raises(UpstreamError, match="upstream task id refused: upstream_id: ") as caught:
        inputs.upstream_outcome(SubmitOutcome(upstream_id="tsk\x00" + "x" * 300))
    assert caught.value.error_class is ErrorClass.PARSE_FAILED
    answered = inputs.upstream_outcome(SubmitOutcome(upstream_id="y" * 300, result=_result()))
    assert answered.upstream_id.startswith("sha256:")


def test_upstream_error_messages_never_carry_a_configured_secret() -> None:
    secret = "sk-live-hardening-0123456789"
    ConnectorConfig(platform="openai", base_url="http://127.0.0.1:9", api_key=secret)
    echoed = json.dumps({"error": {"message": f"Incorrect API key provided: {secret}"}})
    error = classify_http_error(401, {}, echoed.encode())
    assert secret not in error.message and "[redacted]" in error.message
    assert secret not in str(UpstreamError(ErrorClass.AUTH, f"bad key {secret}"))
    assert secret not in error_dict(ErrorClass.UPSTREAM_FAILED, f"stream said {secret}")["message"]
    proxy = "http://user:proxy-pass-123@127.0.0.1:3128"
    ConnectorConfig(platform="openai", base_url="http://x", egress_proxies=(proxy,))
    assert "proxy-pass-123" not in UpstreamError(ErrorClass.TRANSIENT, f"via {proxy}").message


def test_a_deeply_nested_answer_is_classified_not_a_recursion_error() -> None:
    from analysis.validity import classify_answer

    answer = '{"error": ' + "[" * DEEP + "]" * DEEP + "}"
    assert classify_answer(answer, raw_mime="application/json") is not None
