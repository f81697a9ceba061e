"""A simulated LLM judge: what a chat platform answers to the analysis judge's prompt.

It reads the prompt the way a model would (the JSON entity list after "ENTITIES:" and the
text between the answer fences), labels each entity with crude keyword rules, and, like a
real model sampled at temperature, sometimes says something else (`judge_noise` in the
profile, default 0.1), so repeated judgements of one answer can disagree.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

JUDGE_MARKER = "geo-analysis-judge"
CLASSES = ("recommended", "listed", "compared", "negative", "absence", "other_sense")
_RULES = (
    ("absence", r"couldn't find|no information|not familiar|don't know|没有找到|不了解|找不到"),
    ("other_sense", r"\bpie\b|breakfast|fruit|snow|delphi|粥|吃|早餐|水果|雪"),
    ("negative", r"avoid|complain|slow|overpriced|不推荐|不建议|慢|投诉"),
    ("recommended", r"recommend|best|top pick|推荐|首选|最佳"),
    ("compared", r"\bvs\b|than|compared|unlike|比|相比"),
)


def is_judge_prompt(text: str) -> bool:
    return JUDGE_MARKER in text


def _between(text: str, start: str, end: str) -> str:
    _head, sep, tail = text.partition(start)
    return tail.partition(end)[0] if sep else ""


def judge_reply(prompt: str, rng: random.Random, noise: float) -> str:
    entities: list[dict[str, Any]] = json.loads(_between(prompt, "ENTITIES:", "\n").strip() or "[]")
    answer = _between(prompt, "<<<ANSWER\n", "\nANSWER>>>")
    labels = []
    for entity in entities:
        forms = [entity["name"], *entity.get("aliases", [])]
        if not any(form.lower() in answer.lower() for form in forms):
            continue
        context = next(
            (name for name, pattern in _RULES if re.search(pattern, answer, re.IGNORECASE)),
            "listed",
        )
        if rng.random() < noise:
            context = rng.choice(CLASSES)
        sentiment = {"recommended": "positive", "negative": "negative"}.get(context, "neutral")
        labels.append(
            {
                "name": entity["name"],
                "context": context,
                "sentiment": sentiment,
                "recommended": context == "recommended",
                "sentence": answer.strip().split("\n")[0][:200],
            }
        )
    return "```json\n" + json.dumps({"entities": labels}, ensure_ascii=False) + "\n```"
