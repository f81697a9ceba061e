"""The LLM judge (through the connectors, answered by the simulator) and `analysis_eval`."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from analysis.context import RuleAnalyser
from analysis.evaluation import cohen_kappa, evaluate, load_golden
from analysis.judge import PROMPT_VERSION, JudgeReplyError, LLMJudge, parse_reply
from analysis.mentions import Entity
from analysis.results import CONTEXTS

GOLDEN = Path(__file__).parent / "golden"
ACME = Entity("Acme", ("艾克米",))
APPLE = Entity("Apple", ("苹果",))


def test_cohen_kappa_known_values() -> None:
    assert cohen_kappa([0, 1, 0, 1], [0, 1, 1, 1]) == pytest.approx(0.5)
    assert cohen_kappa(["a", "b"], ["a", "b"]) == 1.0
    assert cohen_kappa(["a", "a", "b", "b"], ["b", "b", "a", "a"]) == pytest.approx(-1.0)


def test_golden_set_covers_every_class_both_languages_and_is_large_enough() -> None:
    items = load_golden(GOLDEN)
    assert len(items) >= 150
    labels = [label for item in items for label in item.labels.values()]
    assert {label[0] for label in labels} == set(CONTEXTS)
    assert {label[1] for label in labels} == {"positive", "neutral", "negative"}
    texts = [item.text for item in items]
    assert any("\u4e00" <= ch <= "\u9fff" for t in texts for ch in t)
    assert any("https://" in t for t in texts) and any("`" in t for t in texts)
    assert any("\n1. " in t for t in texts)


def test_analysis_eval_prints_precision_recall_and_kappa() -> None:
    out = io.StringIO()
    call_command("analysis_eval", "--errors", stdout=out)
    text = out.getvalue()
    for name in (*CONTEXTS, "counted"):
        assert f"\n{name} " in text
    assert "Cohen's kappa" in text and "disagreements:" in text
    evaluation = evaluate(RuleAnalyser(), load_golden(GOLDEN))
    absence = evaluation.score("absence")
    assert f"absence{absence.support:>15}{absence.predicted:>10}" in text
    assert f"Cohen's kappa {evaluation.context_kappa:.3f}" in text


def test_analysis_eval_rejects_a_missing_golden_set(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="no golden set"):
        call_command("analysis_eval", "--golden", str(tmp_path))


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("I think Acme is fine", "not JSON"),
        ('{"labels": []}', "no 'entities' list"),
        ('{"entities": [{"name": "Acme", "context": "great", "sentiment": "neutral"}]}',
         "bad label"),
        ('{"entities": [{"name": "Acme", "context": "listed", "sentiment": "meh"}]}',
         "bad sentiment"),
    ],
)  # fmt: skip
def test_an_unusable_judge_reply_is_refused(reply: str, message: str) -> None:
    with pytest.raises(JudgeReplyError, match=message):
        parse_reply(reply)


def test_a_fenced_judge_reply_is_read() -> None:
    label = '{"name": "Acme", "context": "absence", "sentiment": "neutral"}'
    reply = '```json\n{"entities": [' + label + "]}\n```"
    assert parse_reply(reply)["Acme"]["context"] == "absence"


@pytest.mark.django_db
def test_the_judge_asks_a_platform_through_the_connectors(simulator: Any) -> None:
    judge = LLMJudge.from_environment()
    assert judge.info.version == f"{PROMPT_VERSION}+openai_chat"
    assert not judge.info.deterministic

    result = judge.analyse(
        "I couldn't find any information about Acme. 苹果派很好吃。", [ACME, APPLE]
    )

    acme = result.by_name("Acme")
    assert acme.context in CONTEXTS and acme.matched == 1
    assert acme.occurrences[0].start == len("I couldn't find any information about ")
    asked = [e for e in simulator.answers("openai_chat") if "geo-analysis-judge" in e["question"]]
    assert len(asked) == 1 and PROMPT_VERSION in asked[0]["question"]


@pytest.mark.django_db
def test_a_failed_judge_call_sends_the_answer_to_review(simulator: Any) -> None:
    simulator.script({"match": "geo-analysis-judge", "fault": "auth_error", "times": None})

    result = LLMJudge.from_environment().analyse("Acme is fine.", [ACME])

    assert result.failure.startswith(f"LLM judge ({PROMPT_VERSION}+openai_chat)")
    assert result.by_name("Acme").unsure == "the judge gave no usable label"
    assert "LLM judge" in result.review_reason


@pytest.mark.django_db
def test_the_judge_is_not_asked_when_nothing_matches(simulator: Any) -> None:
    result = LLMJudge.from_environment().analyse("Nothing relevant here.", [ACME])
    assert result.by_name("Acme").context is None
    assert simulator.answers("openai_chat") == []


@pytest.mark.django_db
def test_judge_self_agreement_is_measured_over_repeats(simulator: Any) -> None:
    items = load_golden(GOLDEN)[:12]
    evaluation = evaluate(LLMJudge.from_environment(), items, repeats=3)
    assert evaluation.repeats == 3
    assert evaluation.self_agreement is not None and 0.0 <= evaluation.self_agreement <= 1.0
    asked = [e for e in simulator.answers("openai_chat") if "geo-analysis-judge" in e["question"]]
    assert len(asked) == 3 * len(items)
