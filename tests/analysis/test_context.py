"""The rule analyser: mention context, sentiment, recommendation, review when unsure."""

from __future__ import annotations

import pytest

from analysis.context import RULE_VERSION, RuleAnalyser
from analysis.mentions import Entity
from analysis.results import AnswerAnalysis

ACME = Entity("Acme", ("ACME", "艾克米"), ("acme.com",))
GLOBEX = Entity("Globex", ("环球",), ("globex.com",), ambiguous_words=("环球",))
INITECH = Entity("Initech")
APPLE = Entity("Apple", ("苹果",), ("apple.com",), ambiguous_words=("苹果",))
XIAOMI = Entity("Xiaomi", ("小米",), ("mi.com",))
CRM = [ACME, GLOBEX, INITECH]
PHONES = [XIAOMI, APPLE]


def analyse(text: str, entities: list[Entity] = CRM) -> AnswerAnalysis:
    return RuleAnalyser().analyse(text, entities)


def contexts(text: str, entities: list[Entity] = CRM) -> dict[str, str | None]:
    return {e.name: e.context for e in analyse(text, entities).entities}


def test_the_issue_sentences_are_not_mentions() -> None:
    absent = analyse("I couldn't find any reliable information about Acme.").by_name("Acme")
    assert (absent.context, absent.counted, absent.rank, absent.count) == (
        "absence",
        False,
        None,
        0,
    )
    assert absent.matched == 1 and not absent.unsure
    breakfast = analyse("早餐吃了苹果和小米粥。", PHONES)
    assert breakfast.by_name("Apple").context == "other_sense"
    assert breakfast.by_name("Xiaomi").context == "other_sense"  # a common word, unmarked
    assert not any(e.counted for e in breakfast.entities)


@pytest.mark.parametrize(
    "text",
    [
        "I'm not familiar with a CRM called Acme.",
        "There is no information available on Acme in my sources.",
        "Acme doesn't exist as far as I can tell.",
        "我没有找到关于艾克米的可靠信息。",
        "我不了解艾克米这家公司。",
        "据我所知，艾克米并不存在。",
    ],
)
def test_absence_in_english_and_chinese(text: str) -> None:
    assert contexts(text)["Acme"] == "absence"


def test_a_contrast_that_goes_on_about_the_entity_is_not_absence() -> None:
    acme = analyse("I don't have details on Acme's roadmap, but its features are strong.")
    assert acme.by_name("Acme").context == "listed"
    assert acme.by_name("Acme").sentiment == "positive"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("For a small team I recommend Acme.", {"Acme": "recommended"}),
        ("Popular CRMs include Acme, Globex and Initech.",
         {"Acme": "listed", "Globex": "listed", "Initech": "listed"}),
        ("Acme vs Globex: both cover the basics.", {"Acme": "compared", "Globex": "compared"}),
        ("I'd avoid Initech: users report frequent outages.", {"Initech": "negative"}),
        ("Initech is not recommended for large teams.", {"Initech": "negative"}),
        ("I'd recommend Acme over Globex for startups.",
         {"Acme": "recommended", "Globex": "compared"}),
        ("可以试试艾克米，也可以看看Initech。", {"Acme": "recommended", "Initech": "recommended"}),
        ("不建议选择Initech，稳定性较差。", {"Initech": "negative"}),
    ],
)  # fmt: skip
def test_context_classes(text: str, expected: dict[str, str]) -> None:
    found = contexts(text)
    assert {name: found[name] for name in expected} == expected


def test_ranked_and_recommending_lists() -> None:
    ranked = analyse("Our ranking:\n1. Globex\n2. Acme\n3. Initech")
    assert [e.context for e in ranked.entities] == ["recommended"] * 3
    assert [(e.name, e.rank) for e in ranked.entities] == [
        ("Acme", 2),
        ("Globex", 1),
        ("Initech", 3),
    ]
    plain = analyse("Vendors we looked at:\n- Acme\n- Globex")
    assert plain.by_name("Acme").context == "listed"
    worth = analyse("Two CRMs worth a look:\n- Acme\n- Globex")
    assert worth.by_name("Globex").context == "recommended"


@pytest.mark.parametrize(
    ("text", "context"),
    [
        ("Visit https://www.apple.com/iphone for details.", "listed"),  # own domain
        ("Recipe: https://cooking.example.com/apple-pie-classic", "other_sense"),
        ("```js\nconst apple = fruits[0];\n```", "other_sense"),
        ("Apple pie is a classic dessert.", "other_sense"),
        ("苹果公司发布了新款手机。", "listed"),
        ("妈妈买了两斤苹果。", "other_sense"),
    ],
)
def test_ambiguous_words_in_urls_code_and_prose(text: str, context: str) -> None:
    assert contexts(text, PHONES)["Apple"] == context


def test_a_non_ambiguous_alias_inside_code_or_a_url_is_the_brand() -> None:
    assert contexts("Run `pip install acme-sdk` first.")["Acme"] == "listed"
    assert contexts("See https://www.g2.com/products/acme-crm/reviews")["Acme"] == "listed"


def test_an_ambiguous_word_without_cues_is_counted_but_sent_to_review() -> None:
    result = analyse("我选苹果。", [APPLE])
    apple = result.by_name("Apple")
    assert apple.counted
    assert "ambiguous word" in apple.unsure
    assert result.review_reason.startswith("Apple: '苹果' is an ambiguous word")
    assert result.review_sentence == "我选苹果。"


def test_sentiment_and_supporting_sentence() -> None:
    result = analyse("Some context first. Globex is overpriced and hard to cancel. Acme is great.")
    globex, acme = result.by_name("Globex"), result.by_name("Acme")
    assert (globex.sentiment, globex.sentence) == (
        "negative",
        "Globex is overpriced and hard to cancel.",
    )
    assert (acme.sentiment, acme.recommended) == ("positive", False)
    assert RuleAnalyser.info.version == RULE_VERSION and RuleAnalyser.info.deterministic


def test_rank_counts_only_counted_mentions() -> None:
    result = analyse("I couldn't find information about Acme. Globex is the best choice.")
    assert result.by_name("Acme").rank is None
    assert result.by_name("Globex").rank == 1
