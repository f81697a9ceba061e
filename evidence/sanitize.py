"""Safe display of untrusted upstream answers (docs/architecture.md).

Raw upstream Markdown/HTML is stored as received elsewhere; this module only produces the
display copy.

:func:`render_display_html`
    1. Markdown -> HTML with markdown-it-py, CommonMark preset, ``html=False``: raw HTML in
       the input is ESCAPED (shown as text), never passed through. GFM tables are enabled;
       images are disabled (no remote fetches / tracking pixels from upstream content), so
       ``![alt](url)`` shows as "!" plus an ordinary link.
    2. The result goes through the nh3 (ammonia) allow-list sanitiser as defence in depth:
       only the tags in :data:`ALLOWED_TAGS`; attributes only ``a[href|title]``,
       ``ol[start]``, ``th/td[colspan|rowspan]``; hrefs only absolute ``http``/``https``/
       ``mailto`` (relative URLs, ``javascript:``, ``data:``, ``vbscript:`` ... are dropped);
       every link gets ``rel="nofollow noopener noreferrer"``; ``target``, ``style``,
       ``class``, ``id`` and all ``on*`` handlers are removed; ``script``/``style`` elements
       are removed with their content.

:func:`sanitize_html` applies step 2 alone, for upstream content that really is HTML.
:func:`escape_text` is for every other place untrusted text is put into HTML.
"""

from __future__ import annotations

import html
from functools import lru_cache

import nh3
from markdown_it import MarkdownIt

__all__ = [
    "ALLOWED_ATTRIBUTES",
    "ALLOWED_TAGS",
    "ALLOWED_URL_SCHEMES",
    "LINK_REL",
    "escape_text",
    "render_display_html",
    "sanitize_html",
]

ALLOWED_TAGS = frozenset(
    {
        "p", "br", "strong", "em", "b", "i", "ul", "ol", "li", "a", "code", "pre",
        "blockquote", "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr",
        "th", "td", "hr", "span",
    }
)  # fmt: skip
ALLOWED_ATTRIBUTES: dict[str, frozenset[str]] = {
    "a": frozenset({"href", "title"}),
    "ol": frozenset({"start"}),
    "th": frozenset({"colspan", "rowspan"}),
    "td": frozenset({"colspan", "rowspan"}),
}
ALLOWED_URL_SCHEMES = frozenset({"http", "https", "mailto"})
LINK_REL = "nofollow noopener noreferrer"
_REMOVE_WITH_CONTENT = frozenset({"script", "style"})
_URL_PREFIXES = ("http://", "https://", "mailto:")


def _href_is_safe(value: str) -> bool:
    # Browsers ignore ASCII whitespace/control characters inside a scheme ("java\tscript:").
    compact = "".join(ch for ch in value if ord(ch) > 0x20 and ord(ch) != 0x7F).lower()
    return compact.startswith(_URL_PREFIXES)


def _attribute_filter(tag: str, attr: str, value: str) -> str | None:
    if attr == "href":
        return value if _href_is_safe(value) else None
    if attr in {"start", "colspan", "rowspan"}:
        return value if value.isdigit() and len(value) <= 4 else None
    return value


@lru_cache(maxsize=1)
def _cleaner() -> nh3.Cleaner:
    return nh3.Cleaner(
        tags=set(ALLOWED_TAGS),
        clean_content_tags=set(_REMOVE_WITH_CONTENT),
        attributes={tag: set(attrs) for tag, attrs in ALLOWED_ATTRIBUTES.items()},
        attribute_filter=_attribute_filter,
        strip_comments=True,
        link_rel=LINK_REL,
        url_schemes=set(ALLOWED_URL_SCHEMES),
        url_relative="deny",
    )


@lru_cache(maxsize=1)
def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False})
    md.enable("table")
    md.disable("image")
    return md


def sanitize_html(untrusted_html: str) -> str:
    """Allow-list sanitise an HTML fragment (no Markdown rendering)."""
    return _cleaner().clean(untrusted_html or "")


def render_display_html(untrusted_markdown_or_html: str) -> str:
    """Render untrusted Markdown (raw HTML escaped) to sanitised display HTML."""
    rendered = _markdown().render(untrusted_markdown_or_html or "")
    return sanitize_html(rendered)


def escape_text(s: str) -> str:
    """HTML-escape text for element content and quoted attribute values."""
    return html.escape(s or "", quote=True)
