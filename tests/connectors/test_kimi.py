"""Contract tests: Kimi's `$web_search` tool-call loop against the simulator over real HTTP."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

import pytest
import requests

from connectors.adapters.kimi import (
    CITATIONS_FROM_TEXT,
    ENVELOPE_MIME,
    KimiConnector,
    citations_in_text,
    envelope_bytes,
)
from connectors.base import ErrorClass, UpstreamError
from connectors.retry import VERIFY
from simulator import SimulatorHandle

from .contract import POLICY, cite_everything, result_in, sample, upstream_error

Factory = Callable[..., KimiConnector]
PATH = "POST /v1/chat/completions"


def _intended(simulator: SimulatorHandle) -> dict:
    return simulator.answers("kimi")[-1]


def _requests(simulator: SimulatorHandle) -> int:
    return simulator.stats()["platforms"]["kimi"]["paths"][PATH]


def _rounds(raw: bytes) -> list[dict]:
    return json.loads(raw)["rounds"]


@pytest.mark.parametrize(
    "question", ["Which cloud provider is best for startups?", "哪家云服务最适合初创公司？"]
)
def test_web_search_loop_echoes_the_arguments_and_returns_the_final_answer(
    simulator: SimulatorHandle, kimi_connector: Factory, question: str
) -> None:
    cite_everything(simulator)
    outcome = kimi_connector().submit(sample(question))
    result = outcome.result
    intended = _intended(simulator)

    assert result is not None
    assert result.collection_state == "completed" and result.error is None
    assert result.answer_text == intended["answer_text"]
    assert any(ord(ch) > 0xFFFF for ch in result.answer_text)
    assert _requests(simulator) == 2 and intended["rounds"] == 2

    rounds = _rounds(result.raw)
    assert [r["round"] for r in rounds] == [1, 2]
    first, second = rounds
    assert first["request"]["tools"] == [
        {"type": "builtin_function", "function": {"name": "$web_search"}}
    ]
    assert first["request"]["thinking"] == {"type": "disabled"}
    assert first["body"].rstrip().endswith("data: [DONE]")
    assert second["body"].rstrip().endswith("data: [DONE]")
    echoed_assistant, echoed_tool = second["request"]["messages"][1:]
    call = echoed_assistant["tool_calls"][0]
    assert call["type"] == "builtin_function" and call["function"]["name"] == "$web_search"
    assert echoed_tool == {
        "role": "tool",
        "tool_call_id": call["id"],
        "name": "$web_search",
        "content": call["function"]["arguments"],  # unchanged
    }
    assert json.loads(call["function"]["arguments"])["search_result"]["search_id"]

    assert outcome.upstream_id == intended["upstream_id"]
    assert outcome.request_id == intended["request_id"]  # Msh-Request-Id of the answering round
    assert rounds[1]["headers"]["msh-request-id"] == outcome.request_id
    assert "WEB_SEARCH_ROUNDS_2" in result.warnings


def test_sources_written_as_links_become_citations_with_their_spans(
    simulator: SimulatorHandle, kimi_connector: Factory
) -> None:
    cite_everything(simulator)
    result = kimi_connector().submit(sample("which vendor has the best docs")).result
    intended = _intended(simulator)
    assert result is not None
    expected_urls = list(dict.fromkeys(c["url"] for c in intended["citations"]))
    assert [c.url for c in result.citations] == expected_urls
    for citation in result.citations:
        assert result.answer_text[citation.start : citation.end] == (
            f"[{citation.title}]({citation.url})"
        )
        assert "utm_" not in citation.normalized_url
    assert CITATIONS_FROM_TEXT in result.warnings


def test_no_search_is_one_round_without_tools(
    simulator: SimulatorHandle, kimi_connector: Factory
) -> None:
    cite_everything(simulator)
    connector = kimi_connector()
    body = connector.request_body(sample("q", mode="no_search"), [])
    assert "tools" not in body and "thinking" not in body
    result = connector.submit(sample("offline answer", mode="no_search")).result
    assert result is not None and result.collection_state == "completed"
    assert _requests(simulator) == 1 and len(_rounds(result.raw)) == 1
    assert result.citations == [] and result.warnings == []


def test_several_search_rounds_within_the_bound_complete(
    simulator: SimulatorHandle, kimi_connector: Factory
) -> None:
    cite_everything(simulator, platforms={"kimi": {"search_rounds": 2}})
    result = kimi_connector().submit(sample("two searches please")).result
    assert result is not None and result.collection_state == "completed"
    assert _requests(simulator) == 3
    last_request = _rounds(result.raw)[2]["request"]["messages"]
    assert [m["role"] for m in last_request] == ["user", "assistant", "tool", "assistant", "tool"]


def test_a_loop_past_max_rounds_fails_with_a_clear_error(
    simulator: SimulatorHandle, kimi_connector: Factory
) -> None:
    simulator.configure(profile={"platforms": {"kimi": {"search_rounds": 5}}})
    result = kimi_connector().submit(sample("search forever")).result
    assert result is not None
    assert result.collection_state == "failed"
    assert result.error is not None and result.error["class"] == "upstream_failed"
    assert "did not finish within 3 rounds" in result.error["message"]
    assert _requests(simulator) == 3 and len(_rounds(result.raw)) == 3
    assert not POLICY.decide(ErrorClass.UPSTREAM_FAILED, attempt_no=1, elapsed_seconds=0).retry

    simulator.reset()
    simulator.configure(profile={"platforms": {"kimi": {"search_rounds": 5}}})
    kimi_connector(extra={"max_rounds": 2}).submit(sample("search forever"))
    assert _requests(simulator) == 2


def test_a_single_round_captured_alone_parses(
    simulator: SimulatorHandle, kimi_connector: Factory
) -> None:
    cite_everything(simulator)
    live = kimi_connector().submit(sample("single rounds")).result
    assert live is not None and live.raw_mime == ENVELOPE_MIME
    first, second = (r["body"].encode() for r in _rounds(live.raw))
    answer = KimiConnector.parse(second, content_type="text/event-stream")
    assert answer.collection_state == "completed" and answer.answer_text == live.answer_text
    searching = KimiConnector.parse(first)
    assert searching.collection_state == "failed"
    assert searching.error is not None and "asked for a search" in searching.error["message"]


def test_429_in_a_later_round_raises_with_the_hint_and_every_round_on_record(
    simulator: SimulatorHandle, kimi_connector: Factory
) -> None:
    simulator.script({"match": "[round 2]", "fault": "rate_limit"})
    error = upstream_error(lambda: kimi_connector().submit(sample("late limit")))
    assert error.error_class is ErrorClass.RATE_LIMITED and error.retry_after == 1.0
    assert error.message.startswith("round 2 of the $web_search loop")
    rounds = _rounds(error.raw or b"")
    assert [r["status_code"] for r in rounds] == [200, 429]
    assert "rate_limit_reached_error" in rounds[1]["body"]
    parsed = KimiConnector.parse(error.raw or b"")
    assert parsed.collection_state == "failed"
    assert parsed.error is not None and parsed.error["class"] == "rate_limited"
    assert parsed.error["retry_after"] == 1.0


def test_exceeded_quota_is_a_billing_error_and_not_retried(
    simulator: SimulatorHandle, kimi_connector: Factory
) -> None:
    simulator.script({"match": "broke", "fault": "rate_limit", "params": {"quota": True}})
    with pytest.raises(UpstreamError) as caught:
        kimi_connector().submit(sample("broke account"))
    assert caught.value.status_code == 429
    assert caught.value.error_class is ErrorClass.AUTH
    assert not POLICY.decide(caught.value, attempt_no=1, elapsed_seconds=0).retry


def test_truncated_round_is_truncated_and_keeps_every_round(
    simulator: SimulatorHandle, kimi_connector: Factory
) -> None:
    simulator.script({"match": "[round 2]", "fault": "truncate"})
    result = kimi_connector().submit(sample("cut the answer")).result
    assert result is not None
    assert result.collection_state == "truncated" and result.evidence_state == "partial"
    assert result.error is not None and result.error["class"] == "truncated"
    assert result.error["message"].startswith("round 2:")
    rounds = _rounds(result.raw)
    assert len(rounds) == 2 and "[DONE]" not in rounds[1]["body"]


def test_truncated_search_round_stops_the_loop(
    simulator: SimulatorHandle, kimi_connector: Factory
) -> None:
    simulator.script({"match": "cut the search", "fault": "truncate"})
    result_in(kimi_connector().submit(sample("cut the search")), "truncated")
    assert _requests(simulator) == 1


def test_mid_stream_error_fails_with_a_classified_error(
    simulator: SimulatorHandle, kimi_connector: Factory
) -> None:
    simulator.script({"match": "[round 2]", "fault": "midstream_error"})
    result = result_in(kimi_connector().submit(sample("break the answer")), "failed")
    assert result.error is not None and result.error["class"] == ErrorClass.TRANSIENT.value


def test_hang_in_a_later_round_is_acceptance_unknown_with_the_rounds_kept(
    simulator: SimulatorHandle, kimi_connector: Factory
) -> None:
    simulator.script({"match": "[round 2]", "fault": "hang", "params": {"hang_seconds": 3}})
    with pytest.raises(UpstreamError) as caught:
        kimi_connector(timeout_seconds=0.3).submit(sample("slow answer"))
    error = caught.value
    assert error.error_class is ErrorClass.ACCEPTANCE_UNKNOWN
    assert POLICY.decide(error, attempt_no=1, elapsed_seconds=0).action == VERIFY
    rounds = _rounds(error.raw or b"")
    assert rounds[0]["status_code"] == 200
    assert rounds[1]["error"]["class"] == "acceptance_unknown"
    assert b"sk-kimi-secret" not in (error.raw or b"")
    reparsed = KimiConnector.parse(error.raw or b"")
    assert reparsed.error is not None and reparsed.error["class"] == "acceptance_unknown"


def test_simulator_checks_the_echo(simulator: SimulatorHandle) -> None:
    url = f"{simulator.url('kimi')}/v1/chat/completions"
    tools = [{"type": "builtin_function", "function": {"name": "$web_search"}}]
    user = {"role": "user", "content": "echo check"}
    first = requests.post(
        url,
        json={"model": "k", "messages": [user], "tools": tools},
        headers={"Authorization": "Bearer k"},
        timeout=5,
    ).json()
    call = first["choices"][0]["message"]["tool_calls"][0]
    assistant = first["choices"][0]["message"]
    tampered = {"role": "tool", "tool_call_id": call["id"], "name": "$web_search",
                "content": call["function"]["arguments"].replace(" ", "")}  # fmt: skip
    rejected = requests.post(
        url,
        json={"model": "k", "messages": [user, assistant, tampered], "tools": tools},
        headers={"Authorization": "Bearer k"},
        timeout=5,
    )
    assert rejected.status_code == 400
    assert "unchanged" in rejected.json()["error"]["message"]
    thinking = requests.post(
        url,
        json={"model": "k", "messages": [user], "tools": tools, "thinking": {"type": "enabled"}},
        headers={"Authorization": "Bearer k"},
        timeout=5,
    )
    assert thinking.status_code == 400


def test_capabilities(kimi_connector: Factory) -> None:
    capabilities = kimi_connector().capabilities()
    assert capabilities.modes == frozenset({"web_search", "no_search"})
    problems = capabilities.problems(
        device="desktop", region="cn", mode="deep_thinking", screenshot_policy="required"
    )
    assert len(problems) == 2  # no deep thinking with $web_search, no screenshots
    assert not capabilities.asynchronous and not capabilities.supports_lookup


def test_citations_in_text() -> None:
    text = (
        "See [Acme docs](https://acme.example/docs?utm_source=kimi) and https://globex.example/a."
        "另见 https://initech.example/x，以及 [重复](https://acme.example/docs)。"
    )
    citations = citations_in_text(text)
    assert [c.url for c in citations] == [
        "https://acme.example/docs?utm_source=kimi",
        "https://globex.example/a",
        "https://initech.example/x",
    ]
    assert citations[0].title == "Acme docs"
    assert text[citations[1].start : citations[1].end] == "https://globex.example/a"
    assert text[citations[2].start : citations[2].end] == "https://initech.example/x"


def test_envelope_keeps_bytes_that_are_not_utf8() -> None:
    cut = 'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"云'.encode()[:-1]
    record = {"round": 1, "request": {}, "status_code": 200,
              "headers": {"content-type": "text/event-stream"},
              "body_base64": base64.b64encode(cut).decode()}  # fmt: skip
    result = KimiConnector.parse(envelope_bytes([record], 3))
    assert result.collection_state == "truncated"
    assert result.raw_mime == ENVELOPE_MIME
