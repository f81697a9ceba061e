import pytest

from connectors.citations import (
    Marker,
    char_to_utf8_byte_offset,
    clamp_span,
    find_markers,
    make_citation,
    normalize_url,
    span_before_marker,
    url_domain,
    utf8_byte_to_char_offset,
    utf16_to_char_offset,
)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://acme.example/p?utm_source=openai", "https://acme.example/p"),
        (
            "https://acme.example/p?id=7&utm_medium=x&page=2&gclid=abc&fbclid=q",
            "https://acme.example/p?id=7&page=2",
        ),
        ("https://acme.example/p?b=2&a=1&msclkid=z", "https://acme.example/p?b=2&a=1"),
        ("HTTPS://WWW.Acme.Example:443/Path?Q=Keep", "https://www.acme.example/Path?Q=Keep"),
        ("http://acme.example:80/", "http://acme.example/"),
        ("http://acme.example:8080/x", "http://acme.example:8080/x"),
        ("https://acme.example", "https://acme.example/"),
        (
            "https://acme.example/x?q=a%20b&spm=1.2&ref=home",
            "https://acme.example/x?q=a%20b&ref=home",
        ),
        ("https://acme.example/x#section-2", "https://acme.example/x#section-2"),
        ("https://acme.example/x#utm_source=news", "https://acme.example/x"),
        ("https://acme.example/x#:~:text=brand", "https://acme.example/x"),
        (
            "https://acme.example/x?mc_cid=1&mc_eid=2&_hsenc=3&_hsmi=4&igshid=5&yclid=6",
            "https://acme.example/x",
        ),
        ("https://acme.example/x?flag&utm_campaign=y", "https://acme.example/x?flag"),
        ("/relative/path?utm_source=x", "/relative/path?utm_source=x"),
    ],
)
def test_normalize_url(url: str, expected: str) -> None:
    assert normalize_url(url) == expected


def test_normalize_url_is_idempotent() -> None:
    url = "https://Acme.example/p?id=1&utm_source=x"
    assert normalize_url(normalize_url(url)) == normalize_url(url)


def test_url_domain() -> None:
    assert url_domain("https://www.Acme.example/x") == "acme.example"
    assert url_domain("not a url") == ""


def test_utf8_byte_offsets_to_characters() -> None:
    text = "Acme 云服务 🚀 fast"
    for char_offset in range(len(text) + 1):
        byte_offset = char_to_utf8_byte_offset(text, char_offset)
        assert utf8_byte_to_char_offset(text, byte_offset) == char_offset


def test_byte_offset_inside_a_character_rounds_down_and_clamps() -> None:
    text = "云a"
    assert utf8_byte_to_char_offset(text, 2) == 0  # inside the 3-byte 云
    assert utf8_byte_to_char_offset(text, 99) == len(text)
    assert utf8_byte_to_char_offset(text, -5) == 0


def test_utf16_offsets_count_astral_characters_twice() -> None:
    text = "a🚀b"
    assert utf16_to_char_offset(text, 1) == 1
    assert utf16_to_char_offset(text, 3) == 2
    assert utf16_to_char_offset(text, 10) == 3


def test_clamp_span() -> None:
    assert clamp_span(-3, 5, 10) == (0, 5)
    assert clamp_span(4, 50, 10) == (4, 10)
    assert clamp_span(8, 2, 10) == (8, 8)
    assert clamp_span(None, 4, 10) == (None, 4)


def test_find_markers() -> None:
    text = "Acme is fast[1]. Globex is cheap[2][3]。环球很好【4】 note[^5]"
    markers = find_markers(text)
    assert [m.number for m in markers] == [1, 2, 3, 4, 5]
    assert all(text[m.start : m.end].strip("[]【】^") == str(m.number) for m in markers)


def test_span_before_marker_is_the_claim() -> None:
    text = "Intro. Globex is cheap[2][3] and more."
    markers = find_markers(text)
    start, end = span_before_marker(text, markers[1])
    assert text[start:end] == "Globex is cheap"
    start, end = span_before_marker("环球很好。艾克米更快【1】", Marker(1, 10, 13))
    assert "环球很好。艾克米更快【1】"[start:end] == "艾克米更快"


def test_make_citation_normalizes_and_clamps() -> None:
    citation = make_citation(
        2, "https://acme.example/?utm_source=a", start=3, end=99, text_length=10
    )
    assert citation.id == "c2"
    assert citation.normalized_url == "https://acme.example/"
    assert (citation.start, citation.end) == (3, 10)
