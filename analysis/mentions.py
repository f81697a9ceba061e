"""Brand and competitor mention detection in AI answers (docs/architecture.md).

Pure functions, no Django models. The entry points are :func:`find_mentions` (full result,
including ambiguous spans for review) and :func:`detect_mentions` (per-entity results only).

Normalisation
    Text and aliases go through the same per-cluster normalisation: NFKC, then casefold,
    then NFKC again (so full-width "\\uff21\\uff23\\uff2d\\uff25" equals "acme"; "ß" equals "ss").
    A cluster is one base character plus any following combining marks, so "e" + U+0301 is
    normalised together with its accent. Format characters (category Cf: zero-width space,
    soft hyphen, BOM, ...) are dropped, and every run of whitespace becomes a single space,
    so "Acme\\u00a0Cloud" and "Acme\\n Cloud" match the alias "Acme Cloud". For every
    character of the normalised text we keep the original offsets of the cluster it came
    from, so every reported position and span indexes the ORIGINAL text.

    A match must start and end on a cluster boundary: an alias never matches half of the
    expansion of a single original character (e.g. the "株" inside "㈱").

Boundaries
    Decided per edge of the alias. If the alias starts (ends) with a Latin letter or a
    decimal digit, the character immediately before (after) the match must not be a Latin
    letter or decimal digit. So "Acme" matches "Acme's", "(Acme)", "Acme。", "用Acme做" but
    not "Acmeville", "AcmeCorp" or "pacme". Edges that are CJK (or anything else) have no
    boundary requirement: "艾克米" matches inside "我喜欢艾克米的产品".

Overlaps (one rule for all entities)
    All candidate matches of all aliases of all entities are collected. They are then
    accepted greedily, longest first (ties: leftmost first); a candidate overlapping an
    already accepted span is discarded. So a location is counted at most once, and the
    longest alias wins whichever entity it belongs to: with brand alias "Acme Cloud" and
    competitor alias "Cloud", the text "Acme Cloud" is one brand mention and no competitor
    mention.

Ambiguity
    If aliases of two or more *different* entities match exactly the same span (e.g. both
    list "Apex"), the span is attributed to nobody and reported in
    :attr:`MentionResult.ambiguous` with all candidate entity names, so that the caller
    can send the sample to review; ``EntityMentions.ambiguous`` is True for each of those
    entities (so callers of :func:`detect_mentions` see the flag too). The span still
    occupies its location, so shorter aliases inside it are not counted either.

Rank
    Among the entities that are mentioned, rank 1 is the entity whose first attributed
    mention starts earliest in the text, rank 2 the next, and so on. Entities not
    mentioned have rank ``None``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache

from analysis.chartables import CharTable
from analysis.domains import CitationShare, cited_domain_share

__all__ = [
    "AmbiguousSpan",
    "CitationShare",
    "Entity",
    "EntityMentions",
    "MentionResult",
    "NormalizedText",
    "cited_domain_share",
    "detect_mentions",
    "find_mentions",
    "normalize_text",
]


@dataclass(frozen=True)
class Entity:
    """A brand or competitor. ``name`` is matched as an alias too."""

    name: str
    aliases: tuple[str, ...] = ()
    domains: tuple[str, ...] = ()
    # Aliases the campaign marked as everyday words ("苹果", "Oracle"): a match needs context
    # to count (analysis.context).
    ambiguous_words: tuple[str, ...] = ()

    def surface_forms(self) -> tuple[str, ...]:
        """The name followed by the aliases, in the given order, duplicates included."""
        return (self.name, *self.aliases)


@dataclass
class EntityMentions:
    """Mentions of one entity in one answer. Offsets index the original text."""

    name: str
    mentioned: bool
    count: int
    first_position: int | None
    rank: int | None
    spans: list[tuple[int, int]] = field(default_factory=list)
    # True when an alias of this entity matched a span that an alias of another entity
    # matched too; that span is not counted for anyone (see "Ambiguity" above).
    ambiguous: bool = False


@dataclass(frozen=True)
class AmbiguousSpan:
    """A span matched equally by aliases of several entities; attributed to nobody."""

    start: int
    end: int
    text: str
    entities: tuple[str, ...]

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "entities": list(self.entities)}


@dataclass
class MentionResult:
    entities: list[EntityMentions]
    ambiguous: list[AmbiguousSpan]

    @property
    def needs_review(self) -> bool:
        return bool(self.ambiguous)

    def by_name(self, name: str) -> EntityMentions:
        for item in self.entities:
            if item.name == name:
                return item
        raise KeyError(name)


# --------------------------------------------------------------------------- normalisation


@dataclass(frozen=True)
class NormalizedText:
    """Normalised text plus, per normalised character, the original [start, end) offsets."""

    text: str
    starts: tuple[int, ...]
    ends: tuple[int, ...]
    cluster_start: frozenset[int]  # normalised indexes where an original cluster begins
    cluster_end: frozenset[int]  # normalised indexes (exclusive) where a cluster ends

    def original_span(self, start: int, end: int) -> tuple[int, int]:
        """Map a non-empty normalised [start, end) back to original offsets."""
        return self.starts[start], self.ends[end - 1]


@lru_cache(maxsize=4096)
def _normalize_cluster(cluster: str) -> str:
    out = unicodedata.normalize("NFKC", cluster)
    out = unicodedata.normalize("NFKC", out.casefold())
    return "".join(ch for ch in out if unicodedata.category(ch) != "Cf")


def _clusters(text: str) -> Iterable[tuple[int, int]]:
    """Yield [start, end) of base character + following combining marks."""
    i = 0
    n = len(text)
    while i < n:
        j = i + 1
        while j < n and unicodedata.combining(text[j]):
            j += 1
        yield i, j
        i = j


def normalize_text(text: str) -> NormalizedText:
    """Normalise `text` (module docstring, "Normalisation"), keeping original offsets."""
    # Most answers only hold characters that are a cluster of their own and normalise to one
    # character (ASCII, CJK, most punctuation and emoji): then the text maps one to one
    # except for whitespace runs, and C-level str/regex calls do the work of the
    # per-cluster loop. Anything else (combining marks, expansions such as "ß" -> "ss",
    # dropped format characters) takes the general loop, which defines the result.
    mapped = text.translate(_SIMPLE)
    if len(mapped) != len(text):
        return _normalize_clusters(text)
    return _normalize_simple(mapped)


def _simple_char(ch: str) -> str:
    """A character that is a cluster of its own and normalises to exactly one character maps
    to that character (" " for whitespace); any other character maps to two characters, so a
    length change tells the caller to take the general loop."""
    norm = _normalize_cluster(ch)
    if unicodedata.combining(ch) or len(norm) != 1:
        return _NOT_SIMPLE
    return " " if norm.isspace() else norm


_NOT_SIMPLE = "\x00\x00"
_SIMPLE = CharTable(_simple_char)
_SPACE_RUN = re.compile("  +")


def _normalize_simple(mapped: str) -> NormalizedText:
    """`mapped` is the text through `_SIMPLE`, of the same length: one normalised character
    per original character, whitespace already " ". Collapse each run of spaces into its
    first, which then covers the whole run; every character is its own cluster."""
    n = len(mapped)
    starts: list[int] = []
    ends: list[int] = []
    done = 0
    for run in _SPACE_RUN.finditer(mapped):
        a, b = run.span()
        starts.extend(range(done, a + 1))
        ends.extend(range(done + 1, a + 1))
        ends.append(b)
        done = b
    starts.extend(range(done, n))
    ends.extend(range(done + 1, n + 1))
    size = len(starts)
    return NormalizedText(
        text=_SPACE_RUN.sub(" ", mapped) if done else mapped,
        starts=tuple(starts),
        ends=tuple(ends),
        cluster_start=frozenset(range(size)),
        cluster_end=frozenset(range(1, size + 1)),
    )


def _normalize_clusters(text: str) -> NormalizedText:
    """The general per-cluster loop."""
    chars: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    cstart: set[int] = set()
    cend: set[int] = set()
    for a, b in _clusters(text):
        norm = _normalize_cluster(text[a:b])
        if not norm:
            continue
        if norm.isspace():
            if chars and chars[-1] == " ":
                # Extend the previous space over this whitespace cluster.
                ends[-1] = b
                continue
            norm = " "
        cstart.add(len(chars))
        for ch in norm:
            chars.append(ch)
            starts.append(a)
            ends.append(b)
        cend.add(len(chars))
    return NormalizedText(
        text="".join(chars),
        starts=tuple(starts),
        ends=tuple(ends),
        cluster_start=frozenset(cstart),
        cluster_end=frozenset(cend),
    )


# Aliases, and the words matched for them, repeat for every answer of a campaign: each is
# normalised once per worker, not once per answer (a pure function of the string).
@lru_cache(maxsize=4096)
def normalize_alias(alias: str) -> str:
    """An alias (or any short text) as it is matched: normalised, without outer spaces."""
    return normalize_text(alias).text.strip(" ")


@lru_cache(maxsize=4096)
def _is_word_char(ch: str) -> bool:
    """Latin letter or decimal digit: the characters that glue a Latin word together."""
    if ch.isdecimal():
        return True
    if not unicodedata.category(ch).startswith("L"):
        return False
    if ch.isascii():
        return True
    return unicodedata.name(ch, "").startswith("LATIN ")


# ----------------------------------------------------------------------------- matching


@dataclass(frozen=True)
class _Candidate:
    start: int  # normalised offsets
    end: int
    entity: int


def _candidates(norm: NormalizedText, patterns: dict[str, set[int]]) -> list[_Candidate]:
    found: list[_Candidate] = []
    text = norm.text
    for pattern, owners in patterns.items():
        left_word = _is_word_char(pattern[0])
        right_word = _is_word_char(pattern[-1])
        pos = text.find(pattern)
        while pos != -1:
            end = pos + len(pattern)
            ok = pos in norm.cluster_start and end in norm.cluster_end
            if ok and left_word and pos > 0 and _is_word_char(text[pos - 1]):
                ok = False
            if ok and right_word and end < len(text) and _is_word_char(text[end]):
                ok = False
            if ok:
                found.extend(_Candidate(pos, end, owner) for owner in owners)
            pos = text.find(pattern, pos + 1)
    return found


def find_mentions(text: str, entities: Sequence[Entity]) -> MentionResult:
    """Detect mentions of every entity; see the module docstring for the rules."""
    patterns: dict[str, set[int]] = {}
    for index, entity in enumerate(entities):
        for form in entity.surface_forms():
            alias = normalize_alias(form)
            if alias:
                patterns.setdefault(alias, set()).add(index)

    norm = normalize_text(text)
    candidates = _candidates(norm, patterns)

    # Group identical spans: several entities on one span = ambiguous.
    by_span: dict[tuple[int, int], set[int]] = {}
    for cand in candidates:
        by_span.setdefault((cand.start, cand.end), set()).add(cand.entity)

    ordered = sorted(by_span, key=lambda span: (-(span[1] - span[0]), span[0]))
    taken = [False] * len(norm.text)
    spans_by_entity: list[list[tuple[int, int]]] = [[] for _ in entities]
    ambiguous: list[AmbiguousSpan] = []
    ambiguous_owner_sets: list[set[int]] = []
    for start, end in ordered:
        if any(taken[start:end]):
            continue
        for i in range(start, end):
            taken[i] = True
        orig = norm.original_span(start, end)
        owners = by_span[(start, end)]
        if len(owners) == 1:
            spans_by_entity[next(iter(owners))].append(orig)
        else:
            ambiguous_owner_sets.append(owners)
            ambiguous.append(
                AmbiguousSpan(
                    start=orig[0],
                    end=orig[1],
                    text=text[orig[0] : orig[1]],
                    entities=tuple(entities[i].name for i in sorted(owners)),
                )
            )

    ambiguous_entities = {i for span in ambiguous_owner_sets for i in span}
    results: list[EntityMentions] = []
    for index, (entity, spans) in enumerate(zip(entities, spans_by_entity, strict=True)):
        spans.sort()
        results.append(
            EntityMentions(
                name=entity.name,
                mentioned=bool(spans),
                count=len(spans),
                first_position=spans[0][0] if spans else None,
                rank=None,
                spans=spans,
                ambiguous=index in ambiguous_entities,
            )
        )
    mentioned = sorted(
        (r for r in results if r.first_position is not None),
        key=lambda r: r.first_position if r.first_position is not None else -1,
    )
    for rank, item in enumerate(mentioned, start=1):
        item.rank = rank
    ambiguous.sort(key=lambda a: a.start)
    return MentionResult(entities=results, ambiguous=ambiguous)


def detect_mentions(text: str, entities: Sequence[Entity]) -> list[EntityMentions]:
    """Per-entity mentions, in the order of ``entities``.

    Use :func:`find_mentions` when you also need the ambiguous spans (review flag).
    """
    return find_mentions(text, entities).entities
