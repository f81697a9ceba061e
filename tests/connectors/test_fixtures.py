"""Captured raw responses of every platform parse to the reviewed normalized result, exactly as
`reparse` reads them: bytes only, no content type, no sample.

`fixtures/<platform>/<name>.<ext>` is a transcript captured from the live path and
`<name>.expected.json` the result it must give, reviewed by eye. Regenerate one platform's
streamed captures and every expected result with
`python -m tests.connectors.test_fixtures PLATFORM` (the simulator, seed 7), then review the
diff before committing it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import requests

from connectors.base import NormalizedResult
from connectors.registry import adapter_class

from .contract import CITED_WORLD, comparable, sample
from .test_contract import PLATFORMS

FIXTURES = Path(__file__).parent / "fixtures"
# openai's, collector's and the vendor-served surfaces' expected files are `reparse` printouts
# (test_reparse_command.py); a vendor's JSON task answer has no cut stream to capture.
PRINTOUTS = frozenset(
    {"openai", "collector", "chatgpt_web", "gemini_web", "google_ai_mode", "google_ai_overview"}
)
EXPECTED = sorted(p for p in FIXTURES.glob("*/*.expected.json") if p.parent.name not in PRINTOUTS)
TRUNCATED = sorted(p for p in FIXTURES.glob("*/truncated.*") if ".expected." not in p.name)
# How each platform is asked for the `nonstream.json` capture: (path, headers, body changes).
NONSTREAM = {p.name: p.plain for p in PLATFORMS if p.plain and not p.id} | {
    "openai_chat": ("/v1/chat/completions", {"Authorization": "Bearer k"}, {"stream": False}),
    "deepseek": ("/chat/completions", {"Authorization": "Bearer k"}, {"stream": False}),
}
MODELS = {"anthropic": "claude-test", "perplexity": "sonar", "deepseek": "deepseek-chat",
          "openai_chat": "gpt-4o-mini-search-preview", "kimi": "kimi-k2.6"}  # fmt: skip
CUT = "cut me"
CJK_QUESTION = "哪家云服务最适合初创公司？"
CAPTURES = {"deepseek": {"thinking": "Which cloud is best for startups?", "truncated": CUT},
            "kimi": {"rounds": CJK_QUESTION, "truncated": CUT}}  # fmt: skip
TARGETS = {"gemini": {"region": "global"}, "deepseek": {"mode": "deep_thinking"}}


def _transcript(expected: Path) -> Path:
    stem = expected.name.removesuffix(".expected.json")
    [transcript] = [p for p in expected.parent.glob(f"{stem}.*") if p != expected]
    return transcript


def _parsed(transcript: Path) -> NormalizedResult:
    return adapter_class(transcript.parent.name).parse(transcript.read_bytes())


@pytest.mark.parametrize("expected", EXPECTED, ids=[f"{p.parent.name}/{p.name}" for p in EXPECTED])
def test_parse_of_captured_fixtures_matches_the_reviewed_result(expected: Path) -> None:
    transcript = _transcript(expected)
    reviewed = json.loads(expected.read_text(encoding="utf-8"))
    result = _parsed(transcript)  # sniffed, as `reparse` reads a file
    assert result.raw == transcript.read_bytes()  # kept byte for byte
    assert comparable(result, "raw") == reviewed | {"raw_mime": result.raw_mime}
    typed = adapter_class(transcript.parent.name).parse(
        transcript.read_bytes(), content_type=reviewed["raw_mime"]
    )
    assert comparable(typed, "raw") == reviewed
    for citation in result.citations:
        assert citation.start is None or result.answer_text[citation.start : citation.end]


@pytest.mark.parametrize("transcript", TRUNCATED, ids=[p.parent.name for p in TRUNCATED])
def test_a_captured_cut_stream_is_truncated(transcript: Path) -> None:
    result = _parsed(transcript)
    assert result.raw == transcript.read_bytes()
    assert result.collection_state == "truncated" and result.evidence_state == "partial"
    assert result.error is not None and result.error["class"] == "truncated"


def test_the_fixtures_cover_every_outcome() -> None:
    states = {(p.parent.name, json.loads(p.read_text())["collection_state"]) for p in EXPECTED} | {
        (p.parent.name, "truncated") for p in TRUNCATED
    }
    for platform in {p.parent.name for p in EXPECTED}:
        assert {(platform, "completed"), (platform, "truncated")} <= states
    assert ("kimi", "failed") in states


def write_fixtures(platform: str) -> None:
    """Capture `platform`'s answered and truncated streams (and its non-streaming body, where
    NONSTREAM says how to ask for one) and re-derive every expected result of the platform.
    Captures that need a special simulator profile (kimi's round_limit) are kept as they are."""
    from connectors.base import ConnectorConfig
    from simulator import start_simulator

    folder = FIXTURES / platform
    cls = adapter_class(platform)
    profile = {"emoji_rate": 1.0, "citation_rate": 1.0}
    with start_simulator(seed=7, world=CITED_WORLD, profile=profile) as handle:
        handle.script({"match": CUT, "fault": "truncate", "times": None})
        model = MODELS.get(platform, f"{platform}-test")
        config = ConnectorConfig(platform, handle.url(platform), "sim-key", model)
        connector: Any = cls(config)
        target = TARGETS.get(platform, {})
        captures = CAPTURES.get(
            platform, {"success": "哪家云服务最适合初创公司？", "truncated": CUT}
        )
        for stem, question in captures.items():
            result = connector.submit(sample(question, **target)).result
            kept = [p for p in folder.glob(f"{stem}.*") if ".expected." not in p.name]
            (kept or [folder / f"{stem}.sse"])[0].write_bytes(result.raw)
        if plain := NONSTREAM.get(platform):
            path, headers, changes = plain
            body = connector.request_body(sample("Which CRM has the best support?")) | changes
            response = requests.post(handle.url(platform) + path, json=body, headers=headers,
                                     timeout=5)  # fmt: skip
            (folder / "nonstream.json").write_bytes(response.content)
    for expected in folder.glob("*.expected.json"):
        data = comparable(_parsed(_transcript(expected)), "raw")
        expected.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", "utf-8")


if __name__ == "__main__":
    write_fixtures(sys.argv[1])
