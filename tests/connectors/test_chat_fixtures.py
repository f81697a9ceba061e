"""Captured raw responses of the Chat-Completions-family adapters (OpenAI Chat, DeepSeek, Kimi)
parse to the reviewed normalized result, exactly as `reparse` reads them: bytes only, no
content type, no sample.

Regenerate with `python -m tests.connectors.test_chat_fixtures` (the simulator, seed 42) and
review the expected JSON by eye before committing it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from connectors.adapters.deepseek import DeepSeekConnector
from connectors.adapters.kimi import KimiConnector
from connectors.adapters.openai_chat import OpenAIChatConnector
from connectors.base import Connector, NormalizedResult

from .conftest import CITED_WORLD, sample

FIXTURES = Path(__file__).parent / "fixtures"
ADAPTERS: dict[str, type[Connector]] = {
    "openai_chat": OpenAIChatConnector,
    "deepseek": DeepSeekConnector,
    "kimi": KimiConnector,
}
CASES = [
    ("openai_chat", "success.sse"),
    ("openai_chat", "truncated.sse"),
    ("openai_chat", "nonstream.json"),
    ("deepseek", "thinking.sse"),
    ("deepseek", "truncated.sse"),
    ("deepseek", "nonstream.json"),
    ("kimi", "rounds.json"),
    ("kimi", "round_limit.json"),
    ("kimi", "truncated.json"),
]


def _comparable(result: NormalizedResult) -> dict[str, Any]:
    data = result.to_json()
    for name in ("captured_at", "raw"):
        data.pop(name)
    return data


def _expected_path(platform: str, raw_name: str) -> Path:
    return FIXTURES / platform / (raw_name.rsplit(".", 1)[0] + ".expected.json")


@pytest.mark.parametrize(("platform", "raw_name"), CASES)
def test_parse_of_captured_fixtures_matches_the_reviewed_result(
    platform: str, raw_name: str
) -> None:
    raw = (FIXTURES / platform / raw_name).read_bytes()
    expected = json.loads(_expected_path(platform, raw_name).read_text(encoding="utf-8"))
    result = ADAPTERS[platform].parse(raw)
    assert _comparable(result) == expected
    for citation in expected["citations"]:
        assert result.answer_text[citation["start"] : citation["end"]]


def test_the_fixtures_cover_every_outcome() -> None:
    states = {
        (platform, json.loads(_expected_path(platform, name).read_text())["collection_state"])
        for platform, name in CASES
    }
    for platform in ADAPTERS:
        assert {(platform, "completed"), (platform, "truncated")} <= states
    assert ("kimi", "failed") in states


def _write_fixtures() -> None:
    import requests

    from connectors.base import ConnectorConfig
    from connectors.simulator import start_simulator

    profile = {"emoji_rate": 1.0, "citation_rate": 1.0}
    models = {"openai_chat": "gpt-4o-mini-search-preview", "deepseek": "deepseek-chat",
              "kimi": "kimi-k2.6"}  # fmt: skip
    modes = {"openai_chat": "web_search", "deepseek": "deep_thinking", "kimi": "web_search"}
    with start_simulator(seed=42, world=CITED_WORLD, profile=profile) as handle:
        handle.script({"match": "cut", "fault": "truncate", "times": None})

        def submit(platform: str, question: str) -> bytes:
            config = ConnectorConfig(platform, handle.url(platform), "sim-key", models[platform])
            connector = ADAPTERS[platform](config)
            result = connector.submit(sample(question, region="cn", mode=modes[platform])).result
            assert result is not None
            return result.raw

        captured = {
            ("openai_chat", "success.sse"): submit("openai_chat", "哪家云服务最适合初创公司？"),
            ("openai_chat", "truncated.sse"): submit("openai_chat", "cut this answer"),
            ("deepseek", "thinking.sse"): submit("deepseek", "Which cloud is best for startups?"),
            ("deepseek", "truncated.sse"): submit("deepseek", "cut this answer"),
            ("kimi", "rounds.json"): submit("kimi", "哪家云服务最适合初创公司？"),
            ("kimi", "truncated.json"): submit("kimi", "cut this answer"),
        }
        for platform, path in (("openai_chat", "/v1/chat/completions"),
                               ("deepseek", "/chat/completions")):  # fmt: skip
            response = requests.post(
                handle.url(platform) + path,
                json={"model": models[platform],
                      "messages": [{"role": "user", "content": "Which CRM is best?"}]},
                headers={"Authorization": "Bearer sim-key"},
                timeout=5,
            )  # fmt: skip
            captured[(platform, "nonstream.json")] = response.content
        handle.configure(profile=profile | {"platforms": {"kimi": {"search_rounds": 5}}})
        captured[("kimi", "round_limit.json")] = submit("kimi", "search forever")
    for (platform, raw_name), raw in captured.items():
        (FIXTURES / platform).mkdir(parents=True, exist_ok=True)
        (FIXTURES / platform / raw_name).write_bytes(raw)
        parsed = ADAPTERS[platform].parse(raw)
        text = json.dumps(_comparable(parsed), ensure_ascii=False, indent=2) + "\n"
        _expected_path(platform, raw_name).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    _write_fixtures()
