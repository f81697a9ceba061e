"""Citation helpers shared by the adapters: URL normalisation and offset arithmetic.

Normalisation removes only parameters known to be tracking (docs/architecture.md); any other
parameter may select the content (`?id=`, `?page=`, `?q=`) and is kept verbatim, in order.
Offsets: OpenAI reports character (code point) offsets, Gemini UTF-8 byte offsets,
Perplexity / DashScope inline `[n]` markers; everything is converted to Python `str` indices
and clamped, because upstream offsets are not always inside the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import unquote_plus, urlsplit, urlunsplit

from .base import Citation

TRACKING_PARAMS = frozenset(
    {
        "gclid", "gclsrc", "dclid", "gbraid", "wbraid", "fbclid", "msclkid", "yclid", "ysclid",
        "twclid", "ttclid", "li_fat_id", "igshid", "igsh", "spm", "scm", "mc_cid", "mc_eid",
        "_hsenc", "_hsmi", "__hstc", "__hssc", "__hsfp", "hsctatracking", "ref_src", "ref_url",
        "_ga", "_gl", "mkt_tok", "oly_anon_id", "oly_enc_id", "vero_id", "vero_conv",
        "wickedid", "rb_clickid", "s_kwcid", "srsltid", "sc_cid", "trk", "trkcampaign",
        "xtor", "_openstat", "cmpid", "ncid",
    }
)  # fmt: skip
TRACKING_PREFIXES = ("utm_", "pk_", "hsa_", "mtm_")
DEFAULT_PORTS = {"http": 80, "https": 443}


def is_tracking_param(name: str) -> bool:
    key = unquote_plus(name).strip().lower()
    return key in TRACKING_PARAMS or key.startswith(TRACKING_PREFIXES)


def _without_tracking(query: str) -> str:
    """Drop tracking pairs; every other pair keeps its exact text and position."""
    kept = [pair for pair in query.split("&") if pair and not is_tracking_param(pair.split("=")[0])]
    return "&".join(kept)


def _is_tracking_fragment(fragment: str) -> bool:
    if fragment.startswith(":~:"):  # text fragment directives added by search engines
        return True
    pairs = [pair for pair in fragment.split("&") if pair]
    return bool(pairs) and all("=" in p and is_tracking_param(p.split("=")[0]) for p in pairs)


def _netloc(scheme: str, netloc: str) -> str:
    userinfo, at, hostport = netloc.rpartition("@")
    host, colon, port = hostport.rpartition(":") if not hostport.endswith("]") else ("", "", "")
    if not colon or not port.isdigit():
        host, port = hostport, ""
    host = host.lower().rstrip(".")
    if port and DEFAULT_PORTS.get(scheme) == int(port):
        port = ""
    return f"{userinfo}{at}{host}{':' + port if port else ''}"


def normalize_url(url: str) -> str:
    """The URL with tracking removed and case-insensitive parts lowercased.

    Unparseable or relative input is returned stripped but otherwise unchanged."""
    url = url.strip()
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if not parts.scheme or not parts.netloc:
        return url
    scheme = parts.scheme.lower()
    path = parts.path or "/"
    fragment = "" if _is_tracking_fragment(parts.fragment) else parts.fragment
    return urlunsplit(
        (scheme, _netloc(scheme, parts.netloc), path, _without_tracking(parts.query), fragment)
    )


def url_domain(url: str) -> str:
    """The host without `www.`, lowercased; empty when there is none."""
    try:
        host = urlsplit(url.strip()).hostname or ""
    except ValueError:
        return ""
    return host.lower().removeprefix("www.")


def clamp_offset(offset: int | None, length: int) -> int | None:
    if offset is None:
        return None
    return min(max(offset, 0), length)


def clamp_span(start: int | None, end: int | None, length: int) -> tuple[int | None, int | None]:
    """Offsets inside [0, length] with end >= start; a missing bound stays missing."""
    start, end = clamp_offset(start, length), clamp_offset(end, length)
    if start is not None and end is not None and end < start:
        end = start
    return start, end


def utf8_byte_to_char_offset(text: str, byte_offset: int) -> int:
    """A UTF-8 byte offset into `text` as a `str` index; inside a character it rounds down."""
    encoded = text.encode("utf-8")
    byte_offset = min(max(byte_offset, 0), len(encoded))
    return len(encoded[:byte_offset].decode("utf-8", errors="ignore"))


def char_to_utf8_byte_offset(text: str, char_offset: int) -> int:
    return len(text[: max(char_offset, 0)].encode("utf-8"))


def utf16_to_char_offset(text: str, unit_offset: int) -> int:
    """A UTF-16 code unit offset (JavaScript string index) as a `str` index."""
    units = 0
    for index, char in enumerate(text):
        if units >= unit_offset:
            return index
        units += 2 if ord(char) > 0xFFFF else 1
    return len(text)


@dataclass(frozen=True)
class Marker:
    number: int  # as written, usually 1-based
    start: int
    end: int


_MARKER = re.compile(r"\[(\d{1,3})\]|【(\d{1,3})】|\[\^(\d{1,3})\]")


def find_markers(text: str) -> list[Marker]:
    """Inline citation markers `[n]`, `【n】` and `[^n]`, in order of appearance."""
    found: list[Marker] = []
    for match in _MARKER.finditer(text):
        number = next(group for group in match.groups() if group is not None)
        found.append(Marker(int(number), match.start(), match.end()))
    return found


_SENTENCE_END = re.compile(r"[.!?。！？\n]")


def span_before_marker(text: str, marker: Marker) -> tuple[int, int]:
    """The claim a marker supports: from the previous sentence end to the marker, trimmed,
    skipping directly adjacent markers (`... fact[1][2]`)."""
    end = marker.start
    while end > 0 and text[end - 1] == "]":
        previous = [m for m in find_markers(text[:end]) if m.end == end]
        if not previous:
            break
        end = previous[0].start
    start = 0
    for match in _SENTENCE_END.finditer(text, 0, max(end - 1, 0)):
        start = match.end()
    while start < end and text[start].isspace():
        start += 1
    return start, end


def make_citation(
    index: int,
    url: str,
    *,
    title: str | None = None,
    start: int | None = None,
    end: int | None = None,
    text_length: int | None = None,
) -> Citation:
    """A Citation with id `c<index>` (1-based), normalized URL and, given the text length,
    offsets clamped into the text."""
    if text_length is not None:
        start, end = clamp_span(start, end, text_length)
    return Citation(
        id=f"c{index}",
        url=url,
        normalized_url=normalize_url(url),
        title=title or None,
        start=start,
        end=end,
    )


@dataclass
class CitationList:
    """Citations numbered `c1`, `c2`, ... in the order they are added; given the answer's
    length, their spans are clamped into it (`make_citation`)."""

    text_length: int | None = None
    items: list[Citation] = field(default_factory=list)

    def add(self, url: str, title: str | None = None, start: int | None = None,
            end: int | None = None) -> None:  # fmt: skip
        number = len(self.items) + 1
        span = {"start": start, "end": end, "text_length": self.text_length}
        self.items.append(make_citation(number, url, title=title, **span))


def claim_span_before_marker(text: str, marker: Marker) -> tuple[int, int]:
    """`span_before_marker` without the markers of the previous claim at its start.

    When markers follow the punctuation (`First.[1] Second.[2]`) the previous sentence end is
    before `[1]`, so the plain span of `[2]` would be `[1] Second.`; this one is `Second.`."""
    start, end = span_before_marker(text, marker)
    while start < end:
        leading = [m for m in find_markers(text[start:end]) if m.start == 0]
        if not leading:
            break
        start += leading[0].end
        while start < end and text[start].isspace():
            start += 1
    return start, end


def search_queries(queries: list[object]) -> list[str]:
    """The searches an engine ran, as text: stripped, empty ones dropped, each once, in the
    order the engine ran them."""
    found: list[str] = []
    for query in queries:
        text = query.strip() if isinstance(query, str) else ""
        if text and text not in found:
            found.append(text)
    return found


def found_sources(cited: list[Citation], consulted: list[tuple[str, str | None]]) -> list[Citation]:
    """Sources consulted but not cited: each (url, title) of `consulted` whose normalized URL
    no citation of `cited` has, once, in order, numbered `f1`, `f2`, ... without offsets."""
    seen = {c.normalized_url for c in cited}
    found: list[Citation] = []
    for url, title in consulted:
        if not url:
            continue
        citation = make_citation(len(found) + 1, url, title=title)
        if citation.normalized_url in seen:
            continue
        seen.add(citation.normalized_url)
        citation.id = f"f{len(found) + 1}"
        found.append(citation)
    return found
