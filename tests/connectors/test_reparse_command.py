"""`manage.py reparse --platform NAME FILE` gives the normalized result the live path gave, for
every platform's captured transcripts (the fixtures were captured from the live path)."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

FIXTURES = Path(__file__).parent / "fixtures"
# Fields a re-parse of a file cannot know (HTTP status and request-id headers, the sample) or
# that are shown differently (raw by digest); everything else must be identical.
NOT_COMPARED = {
    "sample_id",
    "status_code",
    "request_id",
    "captured_at",
    "raw",
    "raw_mime",
    "raw_sha256",
    "raw_size",
}

CASES = sorted((expected.parent.name, expected) for expected in FIXTURES.glob("*/*.expected.json"))


def _transcript_for(expected: Path) -> Path:
    stem = expected.name.removesuffix(".expected.json")
    candidates = [
        p for p in expected.parent.glob(f"{stem}.*") if not p.name.endswith(".expected.json")
    ]
    assert len(candidates) == 1, candidates
    return candidates[0]


def test_every_platform_has_captured_fixtures() -> None:
    platforms = {platform for platform, _ in CASES}
    assert platforms >= {
        "openai",
        "collector",
        "openai_chat",
        "anthropic",
        "gemini",
        "perplexity",
        "deepseek",
        "kimi",
        "doubao",
        "qwen",
        "ollama",
        # consumer surfaces, from their vendor's captured task answers (DataForSEO's task_get)
        "chatgpt_web",
        "gemini_web",
        "google_ai_mode",
        "google_ai_overview",
    }


@pytest.mark.parametrize(("platform", "expected"), CASES, ids=[f"{p}/{e.name}" for p, e in CASES])
def test_reparse_prints_the_expected_normalized_result(platform: str, expected: Path) -> None:
    out = StringIO()
    call_command("reparse", str(_transcript_for(expected)), platform=platform, stdout=out)
    printed = json.loads(out.getvalue())
    wanted = json.loads(expected.read_text(encoding="utf-8"))
    for field in (
        "collection_state",
        "answer_text",
        "citations",
        "error",
        "warnings",
        "upstream_id",
    ):
        assert field in printed
    assert {k: v for k, v in printed.items() if k not in NOT_COMPARED} == {
        k: v for k, v in wanted.items() if k not in NOT_COMPARED
    }


def test_reparse_rejects_an_unknown_platform(tmp_path: Path) -> None:
    transcript = tmp_path / "x.sse"
    transcript.write_bytes(b"data: {}\n\n")
    with pytest.raises(CommandError, match="unknown platform 'nope'"):
        call_command("reparse", str(transcript), platform="nope")


def test_reparse_names_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match=r"missing\.sse"):
        call_command("reparse", str(tmp_path / "missing.sse"), platform="openai")
