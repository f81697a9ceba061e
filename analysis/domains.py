"""Citation shares and top cited domains, over the host rules of evidence/domains.py."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from analysis.stats import Rate, rate
from evidence.domains import display_domain, extract_host, host_matches, registrable_domain

__all__ = [
    "CitationShare",
    "cited_domain_share",
    "display_domain",
    "extract_host",
    "host_matches",
    "registrable_domain",
    "top_cited_domains",
]


@dataclass(frozen=True)
class CitationShare:
    """Citations pointing at the brand's domains, out of all citations."""

    brand: int
    total: int
    unparseable: int
    rate: Rate


def cited_domain_share(citation_urls: Iterable[str], brand_domains: Iterable[str]) -> CitationShare:
    """Share of citations whose host is one of ``brand_domains`` or a subdomain of one.

    Matching is by host suffix at a label boundary ("docs.acme.com" counts for "acme.com",
    "notacme.com" does not), not by registrable domain, so a brand domain may be narrower
    than its registrable domain (e.g. "acme.github.io"). Citations without a parseable host
    stay in the denominator and are counted in ``unparseable``: nothing is dropped.
    """
    brands = [h for h in (extract_host(d) for d in brand_domains) if h]
    total = 0
    brand = 0
    unparseable = 0
    for url in citation_urls:
        total += 1
        host = extract_host(url)
        if host is None:
            unparseable += 1
            continue
        if any(host_matches(host, b) for b in brands):
            brand += 1
    return CitationShare(brand=brand, total=total, unparseable=unparseable, rate=rate(brand, total))


def top_cited_domains(
    citation_urls: Iterable[str], *, limit: int | None = 10, include_private: bool = True
) -> list[tuple[str, int]]:
    """Most cited registrable domains, ties broken alphabetically; unparseable ones skipped."""
    counts: Counter[str] = Counter()
    for url in citation_urls:
        domain = registrable_domain(url, include_private=include_private)
        if domain is not None:
            counts[domain] += 1
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ordered if limit is None else ordered[:limit]
