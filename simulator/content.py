"""The simulated world and the answers it produces.

A world is the brands an answer may mention, each with aliases and domains, plus neutral
domains. The simulator learns a campaign's entities two ways (docs/decisions.md, "The simulator
answers about the campaign's own entities"): the names a question asks about ("Is Zephyr better
than Brightwave ...", "比较艾克米和环球"), read from the question text, and a registry a harness
fills before a run (`POST /_sim/entities`, the demo from its campaign file). A connector sends
nothing beyond the platform's own request.

Each entity gets a role in each answer, drawn from the call's seeded random: recommended,
listed, compared (with another entity of the same answer), negative, or not mentioned (nothing,
an "I could not find information" sentence, or its name used in an everyday sense). The chance
to be mentioned is the entity's `mention_rate` moved by a fixed per-platform amount, so
platforms differ the way engines do. Answers are in the question's language, in sentences the
rule analyser (analysis/context.py) classifies as the role intended.

Answers are built sentence by sentence so every citation's span is known exactly:
`text[start:end] == cited_text` in Python `str` (code point) indices. Protocol modules convert
to their wire units (UTF-8 bytes for Gemini, `[n]` markers for Perplexity, ...).
"""

from __future__ import annotations

import random
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from analysis.lexicon import COMMON_WORDS

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


@dataclass(frozen=True)
class Brand:
    name: str
    aliases: tuple[str, ...] = ()
    domains: tuple[str, ...] = ()
    mention_rate: float = 0.6
    # Words of its names that are everyday words too: the answer may use them in that sense.
    everyday: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Brand:
        return cls(
            name=str(data["name"]),
            aliases=tuple(str(a) for a in data.get("aliases", ())),
            domains=tuple(str(d) for d in data.get("domains", ())),
            mention_rate=float(data.get("mention_rate", 0.6)),
            everyday=tuple(str(w) for w in data.get("everyday", ())),
        )

    def surface_forms(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    def everyday_words(self) -> tuple[str, ...]:
        forms = [f for f in self.surface_forms() if f.lower() in COMMON_WORDS]
        return tuple(dict.fromkeys((*self.everyday, *forms)))


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
                    "everyday": list(b.everyday),
                }
                for b in self.brands
            ],
            "neutral_domains": list(self.neutral_domains),
        }

    def with_brands(self, brands: list[Brand], *, replace: bool) -> World:
        """The registry after `POST /_sim/entities`: a brand of the same name is replaced."""
        kept = [] if replace else [b for b in self.brands if b.name not in {n.name for n in brands}]
        return World(brands=(*kept, *brands), neutral_domains=self.neutral_domains)

    def brand_named(self, written: str) -> Brand | None:
        wanted = written.casefold()
        return next(
            (b for b in self.brands if any(f.casefold() == wanted for f in b.surface_forms())),
            None,
        )


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


# A source every simulated search finds and no answer cites ("found, not cited").
UNCITED_SOURCE = ("https://en.wikipedia.org/wiki/Cloud_computing", "Cloud market overview")


def searches_for(question: str) -> list[str]:
    """The web searches a simulated engine runs for `question` (query fan-out): the question
    itself and a review search, each at most 100 characters. No randomness is drawn, so the
    answers of a seed stay as they were."""
    asked = " ".join(question.split())[:100]
    if not asked:
        return []
    suffix = " 评测" if is_cjk(asked) else " reviews"
    return [asked, asked[: 100 - len(suffix)] + suffix]


# --- which entities an answer is about ------------------------------------------------------

# Capitalised words that are not names of anything an answer would recommend.
_GENERIC = frozenset(
    {
        "a", "an", "the", "i", "is", "are", "does", "do", "did", "which", "what", "who", "how",
        "why", "when", "where", "should", "can", "could", "would", "will", "my", "our", "we",
        "crm", "erp", "ai", "api", "apis", "saas", "seo", "hr", "it", "b2b", "b2c", "smb", "llm",
        "us", "uk", "eu", "usa", "pdf", "app", "apps", "cloud", "software", "tool", "tools",
    }
)  # fmt: skip
_WORD = r"[A-Z][A-Za-z0-9&+-]*"
_NAME = rf"{_WORD}(?:[ \t]+{_WORD}){{0,2}}"
_ASKED_EN = (
    # a name after a word that introduces one: "better than X", "X vs Y", "is X good"
    re.compile(
        rf"(?i:\b(?:than|vs\.?|versus|or|and|between|like|to|about|is|does|use|choose|pick|"
        rf"try|recommend|compare|over))[ \t]+({_NAME})"
    ),
    re.compile(rf"({_NAME})[ \t]+(?i:vs\.?|versus|or|and|compared|better|worse)\b"),
)
_ASKED_LATIN_IN_CJK = re.compile(r"[A-Za-z][A-Za-z0-9&+-]*(?:[ \t]+[A-Z][A-Za-z0-9&+-]*)*")
_HAN = r"[\u4e00-\u9fff]{2,4}?"
_ASKED_ZH = re.compile(
    rf"(?:比较|对比|^|[，。？?！、\s])({_HAN})(?:和|与|跟|还是)({_HAN})"
    r"(?=哪个|谁|相比|的区别|怎么|[。？?，,！]|$)"
)
QUESTION_MENTION_RATE = 0.55  # a name only the question gives: no more known about it


def _clean_name(candidate: str) -> str:
    """Leading question words and generic terms dropped: "Is Zephyr" -> "Zephyr"."""
    words = candidate.split()
    while words and words[0].lower() in _GENERIC:
        words.pop(0)
    return " ".join(words)


def names_in_question(question: str) -> list[str]:
    """The entity names a question asks about, in order, without repeats."""
    found: list[str] = []
    if is_cjk(question):
        found += [m.group(0) for m in _ASKED_LATIN_IN_CJK.finditer(question)]
        for match in _ASKED_ZH.finditer(question):
            found += [match.group(1), match.group(2)]
    else:
        for pattern in _ASKED_EN:
            found += [m.group(1) for m in pattern.finditer(question)]
    names = (_clean_name(name) for name in found)
    return list(dict.fromkeys(n for n in names if n and n.lower() not in _GENERIC))


def entities_for(question: str, world: World) -> tuple[list[Brand], list[str]]:
    """(the entities the answer is about: the registry's plus those only the question names,
    the names the question writes)."""
    asked = names_in_question(question)
    brands = list(world.brands)
    for name in asked:
        if world.brand_named(name) is None and name not in {b.name for b in brands}:
            brands.append(Brand(name, mention_rate=QUESTION_MENTION_RATE))
    return brands, asked


def visibility(brand: Brand, platform: str) -> float:
    """The chance an answer on `platform` mentions `brand`: its rate moved by a fixed amount
    per (platform, brand), so one engine favours a brand another one rarely names. A rate of
    0 or 1 stays (tests that need every brand cited set 1)."""
    if brand.mention_rate <= 0.0 or brand.mention_rate >= 1.0:
        return brand.mention_rate
    shift = random.Random(f"visibility|{platform}|{brand.name}").uniform(-0.25, 0.25)
    return min(0.95, max(0.05, brand.mention_rate + shift))


# --- what the answer says about each ----------------------------------------------------------

RECOMMENDED, LISTED, COMPARED, NEGATIVE = "recommended", "listed", "compared", "negative"
ABSENT, NOT_FOUND, OTHER_SENSE = "absent", "not_found", "other_sense"
COUNTED_ROLES = (RECOMMENDED, LISTED, COMPARED, NEGATIVE)
_COUNTED_WEIGHTS = (0.35, 0.3, 0.2, 0.15)

_FEATURES_EN = ("fast setup", "transparent pricing", "strong support", "good integrations")
_FEATURES_ZH = ("部署快捷", "价格透明", "售后服务好", "集成能力强")
# Each sentence is written so the rule analyser reads the role intended: a recommendation word
# aimed at the name, a neutral mention, two names compared, criticism, an absence phrase,
# everyday-sense cues (analysis/lexicon.py). Every sentence about the brand also carries a
# brand-sense cue (product, vendor, 产品, 公司...), so a name that is an everyday word too is
# read as the brand without a person deciding.
_SENTENCES_EN = {
    RECOMMENDED: (
        "The {x} platform is often recommended thanks to {feature}.",
        "For this product category, I would recommend {x}: {feature}.",
    ),
    LISTED: (
        "{x} also offers a product for this use case.",
        "{x} is another vendor in this space.",
    ),
    COMPARED: (
        "Compared with {y}, {x} covers a similar feature set at a different price.",
        "{x} versus {y}: the two products cover much the same ground.",
    ),
    NEGATIVE: (
        "Some customers complain that {x} is slow and overpriced.",
        "Reviews of the {x} platform mention outages and poor support.",
    ),
    NOT_FOUND: ("I could not find reliable information about the company {x}.",),
    OTHER_SENSE: ('Outside this topic, "{x}" is an everyday word, as in recipes or the weather.',),
}
_SENTENCES_ZH = {
    RECOMMENDED: ("{x}的产品口碑较好，推荐{x}，{feature}。", "我们推荐{x}这款软件，{feature}。"),
    LISTED: ("{x}也是常被提到的一款产品。", "{x}在国内也有不少用户。"),
    COMPARED: ("{x}和{y}的产品相比，功能相近，价格各有不同。",),
    NEGATIVE: ("不少用户投诉{x}不稳定，客服响应慢。", "{x}的产品缺点是费用很高，而且经常卡顿。"),
    NOT_FOUND: ("关于{x}这家公司，我没有找到可靠的信息。",),
    OTHER_SENSE: ("题外话：“{x}”在日常生活里也是个常用词，例如天气预报和菜谱里。",),
}
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


def _role(brand: Brand, asked: bool, rng: random.Random, platform: str) -> str:
    if rng.random() < visibility(brand, platform):
        return rng.choices(COUNTED_ROLES, weights=_COUNTED_WEIGHTS)[0]
    everyday = brand.everyday_words()
    if everyday and rng.random() < 0.3:
        return OTHER_SENSE
    # An engine says it knows nothing mostly about a name the question put to it.
    if rng.random() < (0.3 if asked else 0.05):
        return NOT_FOUND
    return ABSENT


@dataclass(frozen=True)
class _Part:
    brand: Brand
    role: str


def _plan(
    brands: list[Brand], asked: list[str], world: World, rng: random.Random, platform: str
) -> list[_Part]:
    asked_names = {(world.brand_named(n) or Brand(n)).name for n in asked}
    parts = [_Part(b, _role(b, b.name in asked_names, rng, platform)) for b in brands]
    rng.shuffle(parts)  # which name comes first varies: head-to-head has both orders
    counted = [p for p in parts if p.role in COUNTED_ROLES]
    if len(counted) < 2:  # nothing to compare with: a plain mention
        parts = [_Part(p.brand, LISTED) if p.role == COMPARED else p for p in parts]
    return parts


def _sentence(
    part: _Part, partner: str, label: str, rng: random.Random, chinese: bool, emoji: str
) -> str:
    templates = (_SENTENCES_ZH if chinese else _SENTENCES_EN)[part.role]
    if part.role == OTHER_SENSE:
        word = rng.choice(part.brand.everyday_words())
        label = word if is_cjk(word) else word.lower()
    feature = rng.choice(_FEATURES_ZH if chinese else _FEATURES_EN)
    return emoji + rng.choice(templates).format(x=label, y=partner, feature=feature)


def _intro(question: str, names: list[str], chinese: bool) -> str:
    """The question echoed, unless it names an entity: the echo would mention it in every
    answer whatever the answer says about it."""
    topic = question.strip().rstrip("?？")[:60]
    if any(name.casefold() in topic.casefold() for name in names):
        generic = "关于这个问题，以下是常见的情况。"
        return generic if chinese else "Here is an overview of the options."
    echoed = f"关于“{topic}”，以下是一些常见的选择。"
    return echoed if chinese else f"Here is an overview: {topic}."


def compose_answer(
    question: str,
    world: World,
    rng: random.Random,
    *,
    platform: str = "",
    emoji_rate: float = 0.3,
    cjk_rate: float = 0.1,
    citation_rate: float = 0.8,
) -> SimAnswer:
    chinese = is_cjk(question)
    separator = "" if chinese else " "
    answer = SimAnswer(language="zh" if chinese else "en")
    brands, asked = entities_for(question, world)
    every_name = [form for b in brands for form in b.surface_forms()]
    answer.add(_intro(question, every_name, chinese), separator=separator, cite=None)
    parts = _plan(brands, asked, world, rng, platform)
    labels = {p.brand.name: _brand_label(p.brand, rng, chinese) for p in parts}
    counted = [p.brand.name for p in parts if p.role in COUNTED_ROLES]
    for part in parts:
        if part.role == ABSENT:
            continue
        partner = next((labels[n] for n in counted if n != part.brand.name), "")
        emoji = (rng.choice(_EMOJI) + " ") if rng.random() < emoji_rate else ""
        sentence = _sentence(part, partner, labels[part.brand.name], rng, chinese, emoji)
        cite = None
        if part.role in COUNTED_ROLES and part.brand.domains and rng.random() < citation_rate:
            cite = (
                _url(rng.choice(part.brand.domains), rng),
                f"{part.brand.name} — official site",
                part.brand.name,
            )
        answer.add(sentence, separator=separator, cite=cite)
        if part.role in COUNTED_ROLES:
            answer.mentioned.append(part.brand.name)
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


def entities_of_campaign(campaign: dict[str, Any]) -> list[dict[str, Any]]:
    """A campaign file's brand and competitors, as `POST /_sim/entities` takes them."""
    return [dict(campaign["brand"]), *(dict(c) for c in campaign.get("competitors", ()))]
