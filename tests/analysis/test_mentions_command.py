# Full-width letters and Chinese punctuation in strings are the test data here.
from __future__ import annotations

import json
import re
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from analysis.context import RULE_VERSION

CAMPAIGN = {
    "tenant": "t1",
    "name": "Q3 cloud",
    "brand": {"name": "Acme", "aliases": ["ACME", "艾克米"], "domains": ["acme.com"]},
    "competitors": [
        {"name": "Globex", "aliases": ["环球"], "domains": ["globex.com"]},
        {"name": "Initech", "aliases": [], "domains": []},
    ],
    "questions": ["国内最好的云服务商是哪家？"],
    "targets": ["deepseek", "kimi"],
    "repeats": 2,
}
ANSWER = "推荐环球和ＡＣＭＥ。艾克米（Acme）性价比更高，AcmeCorp 不是同一家。Globex 也可以。"


def write(tmp_path: Path, name: str, content: str) -> str:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    return str(path)


def run(*args: str) -> str:
    out = StringIO()
    call_command("mentions", *args, stdout=out)
    return out.getvalue()


def test_mentions_command_prints_json(tmp_path: Path) -> None:
    campaign = write(tmp_path, "campaign.json", json.dumps(CAMPAIGN, ensure_ascii=False))
    answer = write(tmp_path, "answer.txt", ANSWER)
    raw = run(campaign, answer)
    assert "\\u" not in raw  # ensure_ascii=False
    data = json.loads(raw)
    counts = ("name", "mentioned", "count", "first_position", "rank")
    assert {
        "brand": {k: data["brand"][k] for k in counts},
        "competitors": [{k: c[k] for k in counts} for c in data["competitors"]],
        "ambiguous": data["ambiguous"],
    } == {
        "brand": {
            "name": "Acme",
            "mentioned": True,
            "count": 3,
            "first_position": ANSWER.index("ＡＣＭＥ"),
            "rank": 2,
        },
        "competitors": [
            {
                "name": "Globex",
                "mentioned": True,
                "count": 2,
                "first_position": ANSWER.index("环球"),
                "rank": 1,
            },
            {
                "name": "Initech",
                "mentioned": False,
                "count": 0,
                "first_position": None,
                "rank": None,
            },
        ],
        "ambiguous": [],
    }
    pos = data["brand"]["first_position"]
    assert ANSWER[pos : pos + 4] == "ＡＣＭＥ"
    assert raw.startswith("{\n  ")  # indent=2


def test_mentions_command_reports_ambiguous_spans(tmp_path: Path) -> None:
    doc = dict(CAMPAIGN, competitors=[{"name": "Acme Labs", "aliases": ["acme"]}])
    campaign = write(tmp_path, "campaign.json", json.dumps(doc))
    answer = write(tmp_path, "answer.txt", "Acme is fine.")
    data = json.loads(run(campaign, answer))
    assert data["brand"]["mentioned"] is False
    assert data["ambiguous"] == [
        {"start": 0, "end": 4, "text": "Acme", "entities": ["Acme", "Acme Labs"]}
    ]


def test_mentions_command_accepts_bom_and_no_competitors(tmp_path: Path) -> None:
    doc = {"brand": {"name": "Acme"}}
    campaign = tmp_path / "c.json"
    campaign.write_bytes(b"\xef\xbb\xbf" + json.dumps(doc).encode())
    answer = tmp_path / "a.txt"
    answer.write_bytes(b"\xef\xbb\xbfAcme")
    data = json.loads(run(str(campaign), str(answer)))
    assert data["brand"]["first_position"] == 0
    assert data["competitors"] == []


@pytest.mark.parametrize(
    ("campaign_text", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "must be an object"),
        ('{"name": "x"}', "no 'brand'"),
        ('{"brand": {"aliases": ["A"]}}', "brand.name is missing"),
        ('{"brand": {"name": "  "}}', "brand.name is missing"),
        ('{"brand": "Acme"}', "brand must be an object"),
        ('{"brand": {"name": "Acme", "aliases": "ACME"}}', "brand.aliases must be a list"),
        ('{"brand": {"name": "Acme"}, "competitors": {}}', "competitors must be a list"),
        ('{"brand": {"name": "Acme"}, "competitors": [{"aliases": []}]}',
         "competitors[0].name is missing"),
    ],
)  # fmt: skip
def test_mentions_command_bad_campaign(tmp_path: Path, campaign_text: str, message: str) -> None:
    campaign = write(tmp_path, "campaign.json", campaign_text)
    answer = write(tmp_path, "answer.txt", ANSWER)
    with pytest.raises(CommandError, match=re.escape(message)):
        run(campaign, answer)


def test_mentions_command_missing_files(tmp_path: Path) -> None:
    answer = write(tmp_path, "answer.txt", ANSWER)
    with pytest.raises(CommandError, match="campaign file not found"):
        run(str(tmp_path / "nope.json"), answer)
    campaign = write(tmp_path, "campaign.json", json.dumps(CAMPAIGN))
    with pytest.raises(CommandError, match="answer file not found"):
        run(campaign, str(tmp_path / "nope.txt"))


def test_mentions_command_non_utf8_answer(tmp_path: Path) -> None:
    campaign = write(tmp_path, "campaign.json", json.dumps(CAMPAIGN))
    answer = tmp_path / "answer.txt"
    answer.write_bytes("艾克米".encode("gbk"))
    with pytest.raises(CommandError, match="answer file is not valid UTF-8"):
        run(campaign, str(answer))


def test_mentions_command_shows_context_and_ambiguity_lists(tmp_path: Path) -> None:
    doc = {
        "brand": {"name": "Acme", "aliases": ["艾克米"]},
        "competitors": [
            {"name": "Apple", "aliases": ["苹果"], "ambiguous_words": ["苹果"]},
            {"name": "Xiaomi", "aliases": ["小米"]},
        ],
    }
    campaign = write(tmp_path, "campaign.json", json.dumps(doc, ensure_ascii=False))
    absent = json.loads(
        run(
            campaign,
            write(tmp_path, "a.txt", "I couldn't find any reliable information about Acme."),
        )
    )
    assert absent["brand"]["context"] == "absence"
    assert absent["brand"]["mentioned"] is False and absent["brand"]["rank"] is None
    assert absent["brand"]["matched"] == 1
    assert absent["analyser"] == {"name": "rules", "version": RULE_VERSION}

    breakfast = json.loads(run(campaign, write(tmp_path, "b.txt", "早餐吃了苹果和小米粥。")))
    apple, xiaomi = breakfast["competitors"]
    assert (apple["context"], apple["mentioned"]) == ("other_sense", False)
    assert (xiaomi["context"], xiaomi["mentioned"]) == ("other_sense", False)
    # 苹果 marked by the campaign; Apple and 小米 are common words without being marked
    assert apple["ambiguous_words"] == ["Apple", "苹果"]
    assert xiaomi["ambiguous_words"] == ["小米"]
    assert breakfast["brand"]["ambiguous_words"] == []

    phone = json.loads(run(campaign, write(tmp_path, "c.txt", "推荐小米手机，性价比很高。")))
    assert phone["competitors"][1]["context"] == "recommended"
    assert phone["competitors"][1]["sentiment"] == "positive"
    assert phone["competitors"][1]["sentence"] == "推荐小米手机，性价比很高。"
