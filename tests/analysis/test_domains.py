# Full-width letters and Chinese punctuation in strings are the test data here.
from __future__ import annotations

import socket

import pytest

from analysis.domains import (
    cited_domain_share,
    display_domain,
    extract_host,
    registrable_domain,
    top_cited_domains,
)
from analysis.mentions import cited_domain_share as reexported_share


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """The public suffix list must come from the bundled snapshot, never the network."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


# Nothing registrable: bare suffixes, local names, schemes without a host, broken hosts.
NOT_REGISTRABLE = ["", "   ", "co.uk", "com", "localhost", "http://intranet.corp/",
                   "javascript:alert(1)", "http://exa mple.com/", "http://[::1/"]  # fmt: skip


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("https://www.example.com/path?q=1", "example.com"),
        ("http://WWW.Example.COM.", "example.com"),
        ("example.com", "example.com"),
        ("example.com/some/path", "example.com"),
        ("//cdn.example.com/x.js", "example.com"),
        ("https://news.bbc.co.uk/a", "bbc.co.uk"),
        ("bbc.co.uk", "bbc.co.uk"),
        ("https://www.acme.com.cn/about", "acme.com.cn"),
        ("http://a.b.c.example.org:8080/x", "example.org"),
        ("https://user:secret@www.example.com:8443/", "example.com"),
        ("user@mail.example.net", "example.net"),
        ("mailto:sales@acme.com", "acme.com"),
        ("  https://example.com  ", "example.com"),
        ("https://example.com#frag", "example.com"),
        # IDNA hosts come back as A-labels.
        ("http://例子.中国/path", "xn--fsqu00a.xn--fiqs8s"),
        ("www.xn--fsqu00a.xn--fiqs8s", "xn--fsqu00a.xn--fiqs8s"),
        ("https://bücher.de/", "xn--bcher-kva.de"),
        ("https://BÜCHER.de/", "xn--bcher-kva.de"),
        ("http://例子。中国/", "xn--fsqu00a.xn--fiqs8s"),
        ("ＡＣＭＥ．ｃｏｍ", "acme.com"),
        # IP addresses are returned as they are.
        ("http://192.168.1.10:8080/x", "192.168.1.10"),
        ("10.0.0.1", "10.0.0.1"),
        ("http://[2001:db8::1]:443/", "2001:db8::1"),
        ("[2001:DB8:0::1]", "2001:db8::1"),
        ("2001:db8::1", "2001:db8::1"),
        *((value, None) for value in NOT_REGISTRABLE),
    ],
)
def test_registrable_domain(value: str, expected: str | None) -> None:
    assert registrable_domain(value) == expected


@pytest.mark.parametrize(
    ("value", "with_private", "icann_only"),
    [
        ("https://alice.github.io/blog", "alice.github.io", "github.io"),
        ("foo.bar.blogspot.com", "bar.blogspot.com", "blogspot.com"),
        ("https://github.io", None, "github.io"),
        ("https://github.com/acme/repo", "github.com", "github.com"),
    ],
)
def test_private_suffixes(value: str, with_private: str | None, icann_only: str | None) -> None:
    assert registrable_domain(value) == with_private
    assert registrable_domain(value, include_private=False) == icann_only


def test_display_domain_decodes_a_labels() -> None:
    assert display_domain("xn--fsqu00a.xn--fiqs8s") == "例子.中国"
    assert display_domain("example.com") == "example.com"


def test_extract_host() -> None:
    assert extract_host("https://u:p@Docs.Acme.com:8443/a?b") == "docs.acme.com"
    assert extract_host("") is None


def test_cited_domain_share_counts_subdomains_and_keeps_denominator() -> None:
    citations = [
        "https://acme.com/pricing",
        "https://docs.acme.com/start?utm_source=x",
        "https://notacme.com/",
        "https://globex.com/",
        "not a url at all",
        "https://acme.com.evil.example/",
    ]
    share = cited_domain_share(citations, ["acme.com", "https://ACME.com/"])
    assert share.brand == 2
    assert share.total == 6
    assert share.unparseable == 1
    assert share.rate.n == 6
    assert share.rate.successes == 2
    assert share.rate.value == pytest.approx(2 / 6)
    assert reexported_share is cited_domain_share


def test_cited_domain_share_no_citations() -> None:
    share = cited_domain_share([], ["acme.com"])
    assert share.total == 0
    assert share.rate.value is None
    assert (share.rate.low, share.rate.high) == (0.0, 1.0)


def test_top_cited_domains() -> None:
    citations = [
        "https://www.zhihu.com/q/1",
        "https://zhuanlan.zhihu.com/p/2",
        "https://acme.com/",
        "https://baike.baidu.com/item/x",
        "https://www.baidu.com/s?wd=x",
        "garbage",
        "https://alice.github.io/",
    ]
    assert top_cited_domains(citations, limit=2) == [("baidu.com", 2), ("zhihu.com", 2)]
    assert top_cited_domains(citations, limit=None) == [
        ("baidu.com", 2),
        ("zhihu.com", 2),
        ("acme.com", 1),
        ("alice.github.io", 1),
    ]
