from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from evidence.sanitize import (
    ALLOWED_ATTRIBUTES,
    ALLOWED_TAGS,
    LINK_REL,
    escape_text,
    render_display_html,
    sanitize_html,
)

SAFE_HREF = re.compile(r"^(?:https?://|mailto:)", re.IGNORECASE)


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)


def assert_inert(output: str) -> list[tuple[str, dict[str, str | None]]]:
    """Every element and attribute is allow-listed; no executable URL survives."""
    parser = _Collector()
    parser.feed(output)
    parser.close()
    for tag, attrs in parser.tags:
        assert tag in ALLOWED_TAGS, (tag, output)
        for name, value in attrs.items():
            if tag == "a" and name == "rel":
                assert value == LINK_REL
                continue
            assert name in ALLOWED_ATTRIBUTES.get(tag, frozenset()), (tag, name, output)
            assert not name.startswith("on")
            if name == "href":
                assert value is not None and SAFE_HREF.match(value), (value, output)
    lowered = output.lower()
    # Real markup starts with "<"; escaped text ("&lt;script&gt;") is inert and may remain.
    tag_sources = re.findall(r"<[^>]*>", lowered)
    for needle in ("<script", "<iframe", "<svg", "<img", "<object", "<embed", "<style",
                   "<math", "<!--"):  # fmt: skip
        assert needle not in lowered, (needle, output)
    for needle in ("javascript:", "vbscript:", "data:", "onerror", "onload", "onclick",
                   "onmouseover", "style=", "target=", "src="):  # fmt: skip
        for source in tag_sources:
            assert needle not in source, (needle, output)
    return parser.tags


HOSTILE_MARKDOWN = [
    "<script>alert(1)</script>",
    "Hello <img src=x onerror=alert(1)> world",
    "[click](javascript:alert(1))",
    "[click](JaVaScRiPt:alert(1))",
    "[click](java\tscript:alert(1))",
    "[click](&#106;avascript:alert(1))",
    "[click](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "[click](vbscript:msgbox(1))",
    "[rel](/admin/delete)",
    '<a href="JaVaScRiPt:alert(1)">x</a>',
    '<iframe src="https://evil.example"></iframe>',
    "<svg onload=alert(1)><circle/></svg>",
    '<div style="background:url(javascript:alert(1))">x</div>',
    "<b onmouseover=alert(1)>bold</b>",
    "<p>unclosed <em>tags <a href='https://ok.example'",
    "![x](javascript:alert(1))",
    "![pixel](https://tracker.example/p.gif)",
    "<<script>script>alert(1)<</script>/script>",
    "<!-- <script>alert(1)</script> -->",
    "<math><mtext><table><mglyph><style><img src=x onerror=alert(1)>",
    '[a](https://ok.example "title" onclick=alert(1))',
    "`<script>alert(1)</script>`",
    "```html\n<script>alert(1)</script>\n```",
]


@pytest.mark.parametrize("source", HOSTILE_MARKDOWN)
def test_render_display_html_hostile_input_is_inert(source: str) -> None:
    assert_inert(render_display_html(source))


@pytest.mark.parametrize("source", HOSTILE_MARKDOWN)
def test_sanitize_html_hostile_input_is_inert(source: str) -> None:
    assert_inert(sanitize_html(source))


def test_raw_html_is_escaped_not_passed_through() -> None:
    out = render_display_html("<b>bold</b> and <script>alert(1)</script>")
    assert "&lt;b&gt;bold&lt;/b&gt;" in out
    assert "&lt;script&gt;" in out
    assert "<b>" not in out


def test_markdown_features_render() -> None:
    source = (
        "# Title\n\n"
        "Some **strong**, *em* and `code`.\n\n"
        "- one\n- two\n\n"
        "3. three\n4. four\n\n"
        "> quote\n\n"
        "---\n\n"
        "| a | b |\n|---|---|\n| 1 | 2 |\n\n"
        "```\nx < y\n```\n"
    )
    out = render_display_html(source)
    tags = {tag for tag, _ in assert_inert(out)}
    assert {"h1", "strong", "em", "code", "ul", "ol", "li", "blockquote", "hr", "table",
            "thead", "tbody", "tr", "th", "td", "pre", "p"} <= tags  # fmt: skip
    assert '<ol start="3">' in out
    assert "x &lt; y" in out


def test_links_get_rel_and_keep_safe_href() -> None:
    out = render_display_html("[Acme](https://acme.com/pricing?a=1&b=2) [mail](mailto:a@acme.com)")
    tags = assert_inert(out)
    links = [attrs for tag, attrs in tags if tag == "a"]
    assert links == [
        {"href": "https://acme.com/pricing?a=1&b=2", "rel": LINK_REL},
        {"href": "mailto:a@acme.com", "rel": LINK_REL},
    ]


def test_sanitize_html_strips_target_style_and_handlers() -> None:
    out = sanitize_html(
        '<a href="https://acme.com" target="_blank" rel="opener" onclick="x()" style="color:red">'
        'Acme</a><span style="position:fixed" class="x" id="y">s</span>'
    )
    assert out == f'<a href="https://acme.com" rel="{LINK_REL}">Acme</a><span>s</span>'


def test_sanitize_html_drops_unsafe_and_relative_hrefs() -> None:
    for href in ("JaVaScRiPt:alert(1)", "java&#x09;script:alert(1)", " javascript:alert(1)",
                 "data:text/html,hi", "/relative", "//evil.example/x", "#frag"):  # fmt: skip
        out = sanitize_html(f'<a href="{href}">x</a>')
        assert "href" not in out, (href, out)
        assert out == f'<a rel="{LINK_REL}">x</a>'


def test_sanitize_html_removes_script_and_style_content() -> None:
    assert sanitize_html("<p>a<script>alert(1)</script><style>p{}</style>b</p>") == "<p>ab</p>"


def test_broken_html_is_balanced() -> None:
    out = sanitize_html("<div><b>unclosed <i>nested")
    assert out == "<b>unclosed <i>nested</i></b>"


def test_chinese_text_survives() -> None:
    out = render_display_html("**艾克米**是一家云服务商。")
    assert out.strip() == "<p><strong>艾克米</strong>是一家云服务商。</p>"


def test_escape_text() -> None:
    assert escape_text('<a href="x">\'&') == "&lt;a href=&quot;x&quot;&gt;&#x27;&amp;"
    assert escape_text("") == ""
