"""Host and registrable-domain helpers for citations (stored by evidence, counted by analysis).

Offline only: the public suffix list is the snapshot bundled with ``tldextract``; the
extractor is built with ``suffix_list_urls=()`` (never fetch) and ``cache_dir=None``
(never read or write a cache that another process might have filled from the network), so
results depend only on the installed ``tldextract`` version.

Rules of :func:`registrable_domain`
    * Accepts a full URL, a scheme-less URL ("example.com/path"), or a bare host; userinfo
      ("user:pw@") and ports are removed; a trailing dot is ignored.
    * IP addresses (v4, or v6 with or without brackets) are returned as the IP itself in
      canonical form ("2001:db8::1", no brackets).
    * Hosts are IDNA-encoded (UTS #46 mapping, so full-width letters and "。" separators are
      accepted) and the result is lowercase ASCII (A-labels, "xn--..."). Use
      :func:`display_domain` to show it in Unicode.
    * PRIVATE suffixes of the PSL (github.io, blogspot.com, s3.amazonaws.com, ...) are
      honoured by default: "alice.github.io" -> "alice.github.io", not "github.io". A
      citation of alice's GitHub Pages site is a citation of alice's site, which is also how
      browsers draw site boundaries. Pass ``include_private=False`` for the ICANN-only view.
    * No registrable domain -> ``None``: empty/unparseable input, a bare public suffix
      ("co.uk", "github.io" with private suffixes on), or a host whose TLD is not in the
      list ("localhost", "intranet.corp").
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache
from urllib.parse import urlsplit

import idna
import tldextract

__all__ = ["display_domain", "extract_host", "host_matches", "registrable_domain"]


@lru_cache(maxsize=2)
def _extractor(include_private: bool) -> tldextract.TLDExtract:
    return tldextract.TLDExtract(
        cache_dir=None,
        suffix_list_urls=(),
        fallback_to_snapshot=True,
        include_psl_private_domains=include_private,
    )


@lru_cache(maxsize=8192)
def _to_ascii(host: str) -> str | None:
    # Cached: UTS #46 encoding is about 15 µs a host in pure Python, done for every citation
    # of every answer (and again by the analysis), and the same sites are cited over and over.
    try:
        return idna.encode(host, uts46=True, transitional=False).decode("ascii").lower()
    except (idna.IDNAError, UnicodeError, ValueError):
        pass
    # Lenient fallback (IDNA 2003 codec) for hosts such as "under_score.example.com".
    try:
        encoded = host.encode("idna").decode("ascii").lower()
    except (UnicodeError, ValueError):
        return None
    if not all(c.isalnum() or c in "-._" for c in encoded):
        return None
    return encoded


def extract_host(url_or_host: str) -> str | None:
    """The host of a URL or bare host: lowercase ASCII, no port/userinfo/brackets.

    IP addresses come back in canonical form. ``None`` when there is no usable host.
    """
    value = (url_or_host or "").strip()
    if not value:
        return None
    if "://" not in value and not value.startswith("//"):
        value = "//" + value
    try:
        netloc = urlsplit(value).netloc
    except ValueError:
        return None
    netloc = netloc.rpartition("@")[2]
    if netloc.startswith("["):
        inner, sep, _rest = netloc[1:].partition("]")
        if not sep:
            return None
        host = inner
    else:
        host = netloc
        head, sep, port = host.rpartition(":")
        if sep and (port.isdigit() or port == "") and ":" not in head:
            host = head
    host = host.strip().rstrip(".").rstrip("\u3002\uff0e\uff61")
    if not host:
        return None
    try:
        return str(ipaddress.ip_address(host.split("%", 1)[0]))
    except ValueError:
        pass
    return _to_ascii(host)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def registrable_domain(url_or_host: str, *, include_private: bool = True) -> str | None:
    """eTLD+1 of a URL or host (see the module docstring for every rule)."""
    host = extract_host(url_or_host)
    if host is None:
        return None
    if _is_ip(host):
        return host
    result = _extractor(include_private)(host)
    if not result.suffix or not result.domain:
        return None
    return f"{result.domain}.{result.suffix}"


def display_domain(domain: str) -> str:
    """Unicode form of an A-label domain for display; the input unchanged if undecodable."""
    try:
        return idna.decode(domain)
    except (idna.IDNAError, UnicodeError, ValueError):
        return domain


def host_matches(host: str, domain: str) -> bool:
    """``host`` equals ``domain`` or is a subdomain of it (label boundary)."""
    return host == domain or host.endswith("." + domain)
