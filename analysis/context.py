"""The rule-and-lexicon analyser: literal matches (`analysis.mentions`) put in context.

Per occurrence of an alias, in this order:

1. Sense. An ambiguous alias (marked by the campaign, or in `lexicon.COMMON_WORDS`) is the
   brand only with evidence: a URL on the entity's domains; in code, written with its
   capitals; in prose, more brand cues (company, phone, 手机, a non-ambiguous competitor in
   the same sentence) than everyday cues (pie, 粥, snow, a lowercase "apple") in the
   sentence, else in the whole answer. No cues either way, or a tie: brand as the best
   guess, and the entity goes to review with the reason.
   An ambiguous alias elsewhere in a URL (a path word) is `other_sense`.
2. Absence: an absence phrase in the sentence ("couldn't find information", 没有找到, 不了解,
   does not exist), unless a contrast after it goes on about the entity ("…, but its
   features are strong").
3. Otherwise counted: `recommended` when a recommendation word targets it (the names after
   the word in its clause up to "over"/"than"/比, else the nearest name before it in the
   clause, else the sentence's only name) or it is an item of a numbered list or of a
   bullet list whose lead-in recommends; `negative` when criticism outweighs praise;
   `compared` when the sentence names two entities and compares; else `listed`.

One entity per answer takes its strongest counted class (recommended > negative > compared
> listed), else absence, else other_sense; sentiment is the sign of praise minus criticism
over its counted occurrences.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from . import lexicon as lx
from .mentions import Entity, find_mentions, normalize_alias
from .results import (
    ABSENCE,
    COMPARED,
    COUNTED,
    LISTED,
    NEGATIVE,
    OTHER_SENSE,
    RECOMMENDED,
    AnalyserInfo,
    AnswerAnalysis,
    EntityAnalysis,
    Occurrence,
    with_ranks,
)

RULE_VERSION = "1.0"

_SENTENCE_END = re.compile(r"\n|[。！？!?；;]|\.(?=\s|$)")
_CLAUSE_END = re.compile(r"[，,]")
_URL = re.compile(
    r"https?://[^\s<>()\[\]，。、]+|\b(?:[a-z0-9-]+\.)+(?:com|org|net|io|cn|ai|dev)\b"
)
_CODE = re.compile(r"```.*?(?:```|$)|`[^`\n]+`", re.DOTALL)
_NUMBERED = re.compile(r"^\s*\d+[.)、．]\s*")
_BULLET = re.compile(r"^\s*[-*•·]\s+")
_PRONOUN = re.compile(r"\b(?:it|its|it's|they|their)\b|[它其]", re.IGNORECASE)
_CJK_STOP = re.compile(r"比|相比")


@dataclass(frozen=True)
class _Span:
    start: int
    end: int


@dataclass(frozen=True)
class _Text:
    """The answer cut into sentences, clauses, lines, URLs and code spans."""

    text: str
    sentences: tuple[_Span, ...]
    urls: tuple[_Span, ...]
    code: tuple[_Span, ...]

    @classmethod
    def of(cls, text: str) -> _Text:
        return cls(
            text=text,
            sentences=_split(text, _SENTENCE_END, 0, len(text)),
            urls=tuple(_Span(m.start(), m.end()) for m in _URL.finditer(text)),
            code=tuple(_Span(m.start(), m.end()) for m in _CODE.finditer(text)),
        )

    def sentence(self, pos: int) -> _Span:
        for span in self.sentences:
            if span.start <= pos < span.end:
                return span
        return _Span(pos, pos)

    def clause(self, pos: int) -> _Span:
        sentence = self.sentence(pos)
        for span in _split(self.text, _CLAUSE_END, sentence.start, sentence.end):
            if span.start <= pos < span.end:
                return span
        return sentence

    def line(self, pos: int) -> _Span:
        start = self.text.rfind("\n", 0, pos) + 1
        end = self.text.find("\n", pos)
        return _Span(start, len(self.text) if end == -1 else end)

    def within(self, spans: tuple[_Span, ...], pos: int) -> _Span | None:
        return next((s for s in spans if s.start <= pos < s.end), None)

    def slice(self, span: _Span) -> str:
        return self.text[span.start : span.end]


def _split(text: str, pattern: re.Pattern[str], start: int, end: int) -> tuple[_Span, ...]:
    spans, last = [], start
    for match in pattern.finditer(text, start, end):
        spans.append(_Span(last, match.end()))
        last = match.end()
    if last < end:
        spans.append(_Span(last, end))
    return tuple(s for s in spans if text[s.start : s.end].strip())


@dataclass(frozen=True)
class _Match:
    entity: int
    start: int
    end: int


@dataclass
class _Verdict:
    context: str
    score: int = 0  # praise minus criticism
    unsure: str = ""
    sentence: str = ""


class RuleAnalyser:
    """Needs nothing but the text: the default analyser."""

    info = AnalyserInfo(name="rules", version=RULE_VERSION, deterministic=True)

    def analyse(self, text: str, entities: Sequence[Entity]) -> AnswerAnalysis:
        found = find_mentions(text, entities)
        matches = sorted(
            (_Match(i, s, e) for i, em in enumerate(found.entities) for s, e in em.spans),
            key=lambda m: m.start,
        )
        doc = _Text.of(text)
        ambiguous = [ambiguous_forms(entity) for entity in entities]
        brand_sense = {
            m: _sense(doc, m, entities[m.entity], ambiguous[m.entity], matches, ambiguous)
            for m in matches
        }
        results = []
        for index, entity in enumerate(entities):
            verdicts = [
                (m, _classify(doc, m, brand_sense, matches)) for m in matches if m.entity == index
            ]
            results.append(_entity_result(entity.name, verdicts))
        return AnswerAnalysis(entities=with_ranks(results), ambiguous=tuple(found.ambiguous))


# --- 1. sense -------------------------------------------------------------------------------


def ambiguous_forms(entity: Entity) -> frozenset[str]:
    """The entity's aliases (normalised) that need context to count."""
    marked = {normalize_alias(word) for word in entity.ambiguous_words}
    forms = {normalize_alias(f) for f in entity.surface_forms()}
    common = forms & lx.COMMON_WORDS
    return frozenset(marked | common)


def ambiguous_aliases(entity: Entity) -> list[str]:
    """The same, as the campaign writes them."""
    forms = ambiguous_forms(entity)
    written = dict.fromkeys((*entity.surface_forms(), *entity.ambiguous_words))
    return [alias for alias in written if normalize_alias(alias) in forms]


def _sense(
    doc: _Text,
    match: _Match,
    entity: Entity,
    ambiguous: frozenset[str],
    matches: list[_Match],
    all_ambiguous: list[frozenset[str]],
) -> tuple[bool, str]:
    """(brand sense?, why unsure or "")."""
    written = doc.text[match.start : match.end]
    is_ambiguous = normalize_alias(written) in ambiguous
    url = doc.within(doc.urls, match.start)
    if url is not None:
        on_own_domain = _host_matches(doc.slice(url), entity.domains)
        return (on_own_domain or not is_ambiguous), ""
    if not is_ambiguous:
        return True, ""
    if doc.within(doc.code, match.start) is not None:
        return written != written.lower(), ""
    alias_spans = [(m.start, m.end) for m in matches]
    sentence = doc.sentence(match.start)
    brand, other = _cues(doc.text, sentence.start, sentence.end, alias_spans)
    if _lowercased(written, entity):
        other += 1
    brand += sum(
        1
        for m in matches
        if m.entity != match.entity
        and sentence.start <= m.start < sentence.end
        and normalize_alias(doc.text[m.start : m.end]) not in all_ambiguous[m.entity]
    )
    if brand == other == 0:
        brand, other = _cues(doc.text, 0, len(doc.text), alias_spans)
    if brand > other:
        return True, ""
    if other > brand:
        return False, ""
    why = "no context cues" if brand == 0 else "brand and everyday cues tie"
    return True, f"'{written}' is an ambiguous word ({why})"


def _cues(text: str, start: int, end: int, alias_spans: list[tuple[int, int]]) -> tuple[int, int]:
    """Brand and everyday cue counts in text[start:end], ignoring hits inside an alias."""

    def count(patterns: tuple[re.Pattern[str], ...]) -> int:
        return sum(
            1
            for pattern in patterns
            for hit in pattern.finditer(text, start, end)
            if not any(a <= hit.start() and hit.end() <= b for a, b in alias_spans)
        )

    return count(lx.BRAND_SENSE), count(lx.OTHER_SENSE)


def _lowercased(written: str, entity: Entity) -> bool:
    """ "apple" for the campaign's "Apple": an everyday word is written in lower case."""
    forms = [f for f in entity.surface_forms() if normalize_alias(f) == normalize_alias(written)]
    return written.isascii() and written == written.lower() and any(f != f.lower() for f in forms)


def _host_matches(url: str, domains: Sequence[str]) -> bool:
    raw = url if "://" in url else f"//{url}"
    host = (urlsplit(raw).hostname or "").lower()
    return any(host == d.lower() or host.endswith("." + d.lower()) for d in domains)


# --- 2 and 3. what the answer says about it -------------------------------------------------


def _classify(
    doc: _Text,
    match: _Match,
    brand_sense: dict[_Match, tuple[bool, str]],
    matches: list[_Match],
) -> _Verdict:
    is_brand, unsure = brand_sense[match]
    sentence = doc.sentence(match.start)
    sentence_text = doc.slice(sentence)
    if not is_brand:
        return _Verdict(OTHER_SENSE, sentence=sentence_text)
    named = [m for m in matches if brand_sense[m][0]]
    if _is_absence(doc, match, sentence, named):
        return _Verdict(ABSENCE, unsure=unsure, sentence=sentence_text)
    in_sentence = [m for m in named if sentence.start <= m.start < sentence.end]
    scope = _sentiment_scope(doc, match, sentence, in_sentence)
    score = len(_praise(scope)) - len(_criticism(scope))
    if _recommended(doc, match, sentence, in_sentence):
        context = RECOMMENDED
    elif score < 0 and _criticism(scope):
        context = NEGATIVE
    elif len({m.entity for m in in_sentence}) > 1 and lx.any_hit(lx.COMPARE, sentence_text):
        context = COMPARED
    else:
        context = LISTED
    return _Verdict(context, score=score, unsure=unsure, sentence=sentence_text)


def _praise(text: str) -> list[re.Match[str]]:
    """Praise words, without those inside a negation ("not recommended")."""
    negated = [(n.start(), n.end()) for n in lx.hits(lx.NEGATED_RECOMMEND, text)]
    return [
        hit
        for hit in lx.hits(lx.POSITIVE, text)
        if not any(a <= hit.start() < b for a, b in negated)
    ]


def _criticism(text: str) -> list[re.Match[str]]:
    return lx.hits(lx.NEGATIVE, text)


def _is_absence(doc: _Text, match: _Match, sentence: _Span, named: list[_Match]) -> bool:
    hits = lx.hits(lx.ABSENCE, doc.slice(sentence))
    if not hits:
        return False
    first = sentence.start + min(hit.start() for hit in hits)
    contrasts = [
        sentence.start + c.start()
        for c in lx.hits(lx.CONTRAST, doc.slice(sentence))
        if sentence.start + c.start() > first
    ]
    if not contrasts:
        return True
    pivot = min(contrasts)
    if match.start > pivot:
        return False
    rest = doc.text[pivot : sentence.end]
    names_after = any(pivot <= m.start < sentence.end for m in named)
    return names_after or not _PRONOUN.search(rest)


def _sentiment_scope(doc: _Text, match: _Match, sentence: _Span, in_sentence: list[_Match]) -> str:
    """The sentence for its only name; else the clause, and for a name after "than"/比 only
    what follows it (the praise of "A is easier than B" is A's)."""
    if len({m.entity for m in in_sentence}) <= 1:
        return doc.slice(sentence)
    clause = doc.clause(match.start)
    before = doc.text[clause.start : match.start]
    if _CJK_STOP.search(before):
        return ""
    if lx.any_hit(lx.COMPARE_STOP, before):
        return doc.text[match.end : clause.end]
    return doc.slice(clause)


def _recommended(doc: _Text, match: _Match, sentence: _Span, in_sentence: list[_Match]) -> bool:
    if _list_recommends(doc, match.start):
        return True
    text = doc.slice(sentence)
    negated = [(n.start(), n.end()) for n in lx.hits(lx.NEGATED_RECOMMEND, text)]
    for cue in lx.hits(lx.RECOMMEND, text):
        if any(a <= cue.start() < b for a, b in negated):
            continue
        if match in _targets(
            doc, sentence.start + cue.start(), sentence.start + cue.end(), in_sentence
        ):
            return True
    return False


def _targets(doc: _Text, cue_start: int, cue_end: int, in_sentence: list[_Match]) -> list[_Match]:
    clause = doc.clause(cue_start)
    stop = clause.end
    for hit in lx.hits(lx.COMPARE_STOP, doc.text[cue_end : clause.end]):
        stop = min(stop, cue_end + hit.start())
    after = [m for m in in_sentence if cue_end <= m.start < stop]
    if after:
        first_entity = after[0].entity
        return [m for m in after if m.entity == first_entity or _joined(doc, after[0], m)]
    before = [m for m in in_sentence if clause.start <= m.start < cue_start]
    if before:
        return [before[-1]]
    if len({m.entity for m in in_sentence}) == 1:
        return in_sentence
    return []


def _joined(doc: _Text, first: _Match, other: _Match) -> bool:
    """ "Globex or Initech", "Globex and Initech", "环球、艾克米": both are the object."""
    between = doc.text[first.end : other.start]
    return bool(re.fullmatch(r"\s*(?:or|and|、|和|或)\s*", between, re.IGNORECASE))


def _list_recommends(doc: _Text, pos: int) -> bool:
    line = doc.line(pos)
    text = doc.slice(line)
    if _NUMBERED.match(text):
        return True
    if not _BULLET.match(text):
        return False
    lead = doc.text[: line.start].rstrip("\n")
    for previous in reversed(lead.split("\n")):
        if previous.strip() and not (_BULLET.match(previous) or _NUMBERED.match(previous)):
            return lx.any_hit(lx.LIST_LEAD, previous)
    return False


# --- one entity per answer ------------------------------------------------------------------


def _entity_result(name: str, verdicts: list[tuple[_Match, _Verdict]]) -> EntityAnalysis:
    if not verdicts:
        return EntityAnalysis(name=name)
    occurrences = tuple(Occurrence(m.start, m.end, v.context) for m, v in verdicts)
    counted = [(m, v) for m, v in verdicts if v.context in COUNTED]
    if counted:
        context = min((v.context for _m, v in counted), key=COUNTED.index)
        deciding = next(v for _m, v in counted if v.context == context)
        score = sum(v.score for _m, v in counted)
        sure = [v for _m, v in counted if not v.unsure]
        return EntityAnalysis(
            name=name,
            context=context,
            sentiment="positive" if score > 0 else "negative" if score < 0 else "neutral",
            recommended=context == RECOMMENDED,
            sentence=deciding.sentence.strip(),
            count=len(counted),
            first_position=counted[0][0].start,
            occurrences=occurrences,
            unsure="" if sure else deciding.unsure,
        )
    context = ABSENCE if any(v.context == ABSENCE for _m, v in verdicts) else OTHER_SENSE
    deciding = next(v for _m, v in verdicts if v.context == context)
    return EntityAnalysis(
        name=name,
        context=context,
        sentence=deciding.sentence.strip(),
        occurrences=occurrences,
        unsure=deciding.unsure,
    )
