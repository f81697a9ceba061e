"""The simulated world and the answers it produces.

A world is the brands an answer may mention, each with aliases and domains, plus neutral
domains. Answers are built sentence by sentence so every citation's span is known exactly:
`text[start:end] == cited_text` in Python `str` (code point) indices. Protocol modules convert
to their wire units (UTF-8 bytes for Gemini, `[n]` markers for Perplexity, ...).
"""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass, field
from typing import Any

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


@dataclass(frozen=True)
class Brand:
    name: str
    aliases: tuple[str, ...] = ()
    domains: tuple[str, ...] = ()
    mention_rate: float = 0.6

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Brand:
        return cls(
            name=str(data["name"]),
            aliases=tuple(str(a) for a in data.get("aliases", ())),
            domains=tuple(str(d) for d in data.get("domains", ())),
            mention_rate=float(data.get("mention_rate", 0.6)),
        )


NEUTRAL_DOMAINS = ("en.wikipedia.org", "www.reddit.com", "www.g2.com")


@dataclass(frozen=True)
class World:
    brands: tuple[Brand, ...]
    neutral_domains: tuple[str, ...] = NEUTRAL_DOMAINS

    @classmethod
    def from_value(cls, value: Any) -> World:
        """A list of brand dicts, or {"brands": [...], "neutral_domains": [...]}."""
        if isinstance(value, World):
            return value
        if isinstance(value, list):
            value = {"brands": value}
        brands = tuple(Brand.from_dict(b) for b in value.get("brands", ()))
        neutral = tuple(str(d) for d in value.get("neutral_domains", ())) or NEUTRAL_DOMAINS
        return cls(brands=brands, neutral_domains=neutral)

    def as_dict(self) -> dict[str, Any]:
        return {
            "brands": [
                {
                    "name": b.name,
                    "aliases": list(b.aliases),
                    "domains": list(b.domains),
                    "mention_rate": b.mention_rate,
                }
                for b in self.brands
            ],
            "neutral_domains": list(self.neutral_domains),
        }


DEFAULT_WORLD = World(
    brands=(
        Brand("Acme Cloud", ("Acme", "艾克米"), ("acme.example", "docs.acme.example"), 0.8),
        Brand("Globex", ("Globex Corp", "环球"), ("globex.example",), 0.6),
        Brand("Initech", ("Initech Systems",), ("initech.example",), 0.4),
    )
)


@dataclass(frozen=True)
class SimCitation:
    url: str
    title: str
    start: int
    end: int
    cited_text: str
    brand: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SimAnswer:
    text: str = ""
    citations: list[SimCitation] = field(default_factory=list)
    mentioned: list[str] = field(default_factory=list)
    language: str = "en"

    def add(
        self, sentence: str, *, separator: str, cite: tuple[str, str, str | None] | None
    ) -> None:
        """Append a sentence; when `cite` = (url, title, brand) the sentence is the span."""
        if self.text:
            self.text += separator
        start = len(self.text)
        self.text += sentence
        if cite is not None:
            url, title, brand = cite
            self.citations.append(SimCitation(url, title, start, len(self.text), sentence, brand))


def is_cjk(text: str) -> bool:
    return bool(_CJK.search(text))


_FEATURES_EN = ("fast setup", "transparent pricing", "strong support", "good integrations")
_FEATURES_ZH = ("部署快捷", "价格透明", "售后服务好", "集成能力强")
_PATHS = ("pricing", "docs/getting-started", "blog/comparison", "customers", "features")
_TRACKING = ("?utm_source=openai", "?utm_source=chatgpt.com&utm_medium=referral", "", "", "")
_EMOJI = ("🚀", "✅", "💡", "👍")


def _url(domain: str, rng: random.Random) -> str:
    path = rng.choice(_PATHS)
    query = rng.choice(_TRACKING)
    if rng.random() < 0.2:  # a real parameter that normalisation must keep
        query = (query + "&" if query else "?") + "lang=en&page=2"
    return f"https://{domain}/{path}{query}"


def _brand_label(brand: Brand, rng: random.Random, chinese: bool) -> str:
    cjk_aliases = [a for a in brand.aliases if is_cjk(a)]
    latin_aliases = [a for a in brand.aliases if not is_cjk(a)]
    if chinese and cjk_aliases and rng.random() < 0.5:
        return rng.choice(cjk_aliases)
    if latin_aliases and rng.random() < 0.3:
        return rng.choice(latin_aliases)
    return brand.name


def _brand_sentence(label: str, rng: random.Random, chinese: bool, emoji: str) -> str:
    if chinese:
        return f"{emoji}{label}在这方面口碑较好，{rng.choice(_FEATURES_ZH)}。"
    return f"{emoji}{label} is often recommended thanks to {rng.choice(_FEATURES_EN)}."


def compose_answer(
    question: str,
    world: World,
    rng: random.Random,
    *,
    emoji_rate: float = 0.3,
    cjk_rate: float = 0.1,
    citation_rate: float = 0.8,
) -> SimAnswer:
    chinese = is_cjk(question)
    separator = "" if chinese else " "
    answer = SimAnswer(language="zh" if chinese else "en")
    topic = question.strip().rstrip("?？")[:60]
    intro = (
        f"关于“{topic}”，以下是一些常见的选择。" if chinese else f"Here is an overview: {topic}."
    )
    answer.add(intro, separator=separator, cite=None)
    for brand in world.brands:
        if rng.random() >= brand.mention_rate:
            continue
        label = _brand_label(brand, rng, chinese)
        emoji = (rng.choice(_EMOJI) + " ") if rng.random() < emoji_rate else ""
        sentence = _brand_sentence(label, rng, chinese, emoji)
        cite = None
        if brand.domains and rng.random() < citation_rate:
            cite = (
                _url(rng.choice(brand.domains), rng),
                f"{brand.name} — official site",
                brand.name,
            )
        answer.add(sentence, separator=separator, cite=cite)
        answer.mentioned.append(brand.name)
    if not chinese and rng.random() < cjk_rate:
        answer.add("在中国市场，这些产品也很受欢迎。", separator=separator, cite=None)
    neutral = (
        "第三方评测通常会比较价格、服务和稳定性。"
        if chinese
        else ("Independent reviews compare pricing, support and reliability.")
    )
    domain = rng.choice(world.neutral_domains) if world.neutral_domains else None
    answer.add(
        neutral,
        separator=separator,
        cite=(_url(domain, rng), "Independent review", None) if domain else None,
    )
    outro = "建议在决定前比较最新的方案。" if chinese else "Compare current plans before deciding."
    answer.add(outro, separator=separator, cite=None)
    return answer
