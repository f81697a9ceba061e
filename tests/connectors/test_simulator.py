"""The simulator itself: determinism, control API over HTTP, screenshots."""

from __future__ import annotations

import requests

from analysis.context import RuleAnalyser
from analysis.mentions import Entity
from analysis.results import (
    ABSENCE,
    COMPARED,
    COUNTED,
    LISTED,
    NEGATIVE,
    OTHER_SENSE,
    RECOMMENDED,
)
from simulator import SimulatorHandle, start_simulator
from simulator.content import Brand, names_in_question, visibility
from simulator.png import png_size, screenshot_png


def _ask(base_url: str, question: str) -> dict:
    response = requests.post(
        f"{base_url}/openai/v1/responses",
        json={"model": "m", "input": question, "tools": [{"type": "web_search"}]},
        headers={"Authorization": "Bearer k"},
        timeout=5,
    )
    return response.json()


def test_same_seed_same_answers_and_retries_get_new_draws() -> None:
    with start_simulator(seed=11) as one, start_simulator(seed=11) as two:
        first = [_ask(one.base_url, "q")["output"][-1]["content"][0]["text"] for _ in range(3)]
        second = [_ask(two.base_url, "q")["output"][-1]["content"][0]["text"] for _ in range(3)]
    assert first == second
    assert len(set(first)) > 1  # call 2 of a question is a different draw from call 1


def test_control_api_over_http(simulator: SimulatorHandle) -> None:
    base = simulator.base_url
    assert requests.get(f"{base}/_sim/health", timeout=5).json() == {"ok": True}
    config = {"seed": 5, "profile": {"rates": {"server_error": 1.0}}}
    assert requests.post(f"{base}/_sim/config", json=config, timeout=5).ok
    response = requests.post(
        f"{base}/openai/v1/responses",
        json={"model": "m", "input": "x"},
        headers={"Authorization": "Bearer k"},
        timeout=5,
    )
    assert response.status_code == 500

    script = {"faults": [{"match": "x", "fault": "rate_limit", "times": 1}]}
    assert requests.post(f"{base}/_sim/script", json=script, timeout=5).json()["scripts"] == 1
    stats = requests.get(f"{base}/_sim/stats", timeout=5).json()
    assert stats["platforms"]["openai"]["paths"] == {"POST /v1/responses": 1}

    bad = requests.post(f"{base}/_sim/script", json={"faults": [{"fault": "nope"}]}, timeout=5)
    assert bad.status_code == 400
    assert requests.post(f"{base}/_sim/reset", timeout=5).ok
    assert requests.get(f"{base}/_sim/stats", timeout=5).json()["platforms"] == {}


def test_unknown_platform_is_404(simulator: SimulatorHandle) -> None:
    assert requests.get(f"{simulator.base_url}/nowhere/v1/x", timeout=5).status_code == 404


def test_screenshots_are_valid_pngs_at_device_sizes() -> None:
    assert png_size(screenshot_png("mobile")) == (390, 844)
    assert png_size(screenshot_png("desktop")) == (1280, 800)


NEVER_SEEN = [
    {"name": "Lumenfold", "aliases": ["流明"], "domains": ["lumenfold.io"]},
    {"name": "Quillstack", "domains": ["quillstack.com"]},
    {"name": "Orange Ledger", "aliases": ["Orange"], "domains": ["orangeledger.com"]},
]


def _analysed(answer: dict) -> dict[str, str | None]:
    entities = [
        Entity(e["name"], tuple(e.get("aliases", ())), tuple(e["domains"])) for e in NEVER_SEEN
    ]
    result = RuleAnalyser().analyse(answer["answer_text"], entities)
    return {e.name: e.context for e in result.entities}


def test_answers_are_about_the_registered_entities_in_every_role_the_analyser_reads(
    simulator: SimulatorHandle,
) -> None:
    registered = requests.post(
        f"{simulator.base_url}/_sim/entities",
        json={"entities": NEVER_SEEN, "replace": True},
        timeout=5,
    ).json()
    assert [e["name"] for e in registered["entities"]] == [e["name"] for e in NEVER_SEEN]
    for i in range(30):
        _ask(simulator.base_url, f"Which invoicing tool is best for team {i}?")
        _ask(simulator.base_url, f"哪个开票软件最适合第{i}个团队？")

    answers = simulator.answers("openai")
    contexts = [_analysed(answer) for answer in answers]
    for answer, context in zip(answers, contexts, strict=True):
        counted = {name for name, c in context.items() if c in COUNTED}
        assert counted == set(answer["mentioned"]), answer["answer_text"]
    seen = {c for context in contexts for c in context.values()}
    assert {RECOMMENDED, LISTED, COMPARED, NEGATIVE, ABSENCE, OTHER_SENSE} <= seen
    lumenfold = [c["Lumenfold"] in COUNTED for c in contexts]
    assert 0 < sum(lumenfold) < len(lumenfold)  # mentioned in some answers, not all
    # Each answer is in its question's language (an English one may add a Chinese aside).
    assert {a["answer_text"][:2] for a in answers if "第" in a["question"]} == {"关于"}
    assert {a["answer_text"][:7] for a in answers if "team" in a["question"]} == {"Here is"}


def test_names_a_question_asks_about_are_answered_about_without_a_registry(
    simulator: SimulatorHandle,
) -> None:
    simulator.register_entities(replace=True)  # nothing registered: only the question's names
    for i in range(20):
        _ask(simulator.base_url, f"Is Brightwave better than Northwind for agency {i}?")
    mentioned = [set(a["mentioned"]) for a in simulator.answers("openai")]
    assert set().union(*mentioned) == {"Brightwave", "Northwind"}
    assert any(len(names) < 2 for names in mentioned)  # not named in every answer
    assert names_in_question("比较流明和奎尔，哪个更适合小公司？") == ["流明", "奎尔"]
    assert names_in_question("Which CRM is best for a small team?") == []


def test_platforms_differ_in_how_often_they_name_a_brand() -> None:
    brand = Brand("Lumenfold", mention_rate=0.6)
    rates = {visibility(brand, platform) for platform in ("openai", "kimi", "gemini", "qwen")}
    assert len(rates) == 4 and all(0.0 < rate < 1.0 for rate in rates)
    assert visibility(Brand("Always", mention_rate=1.0), "kimi") == 1.0
