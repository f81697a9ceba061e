"""The category of a cited domain: the shipped, versioned classification
(evidence/data/domain_categories.json), a tenant's overrides (`DomainCategory`), and the
campaign's own and competitor domains.

Keys are registrable domains (evidence/domains.py `registrable_domain`), as `Citation.domain`
stores them. The order of precedence: the brand's domains are `own`, a competitor's are
`competitor` (a host of, or under, one of the entity's domains); then the tenant's override;
then the shipped file's domain entry; then its suffix rules (`.gov`, `.edu`, `.ac.uk`, ...);
anything else is `unclassified`. The file's `version` is shown with every figure made from it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .domains import extract_host, host_matches

OWN = "own"
COMPETITOR = "competitor"
UNCLASSIFIED = "unclassified"
# The categories a domain can have; the file and overrides may use any but own / competitor,
# which come from the campaign.
CATEGORIES = (
    OWN, COMPETITOR, "editorial", "user-generated", "reviews", "reference", "social", "video",
    "commerce", "institutional",
)  # fmt: skip
LISTED = frozenset(CATEGORIES) - {OWN, COMPETITOR}
DATA_FILE = Path(__file__).parent / "data" / "domain_categories.json"


@dataclass(frozen=True)
class Classification:
    version: str
    domains: Mapping[str, str]
    suffixes: Mapping[str, str]

    def listed(self, domain: str) -> str | None:
        """The file's category of a registrable domain (entry, then suffix rule), or None."""
        found = self.domains.get(domain)
        if found is not None:
            return found
        labels = domain.split(".")
        for at in range(1, len(labels)):
            suffix = ".".join(labels[at:])
            if suffix in self.suffixes:
                return self.suffixes[suffix]
        return None


def _checked(table: object, where: str) -> dict[str, str]:
    if not isinstance(table, dict):
        raise ValueError(f"{where}: not an object")
    for key, category in table.items():
        if category not in LISTED:
            raise ValueError(f"{where}: {key!r} has category {category!r}, not one of {LISTED}")
    return {str(key).lower(): str(category) for key, category in table.items()}


@lru_cache(maxsize=1)
def shipped() -> Classification:
    """The classification shipped with this version of the code (read once per process)."""
    data = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    return Classification(
        version=str(data["version"]),
        domains=_checked(data.get("domains", {}), "domains"),
        suffixes=_checked(data.get("suffixes", {}), "suffixes"),
    )


@dataclass(frozen=True)
class Classifier:
    """Categories for one campaign of one tenant: `entities` maps each entity to its
    domains (the brand first), `overrides` the tenant's domain -> category."""

    brand: str
    entities: Mapping[str, tuple[str, ...]]
    overrides: Mapping[str, str]
    classification: Classification

    @property
    def version(self) -> str:
        return self.classification.version

    def entity_of(self, domain: str) -> str | None:
        """The brand or competitor whose domains hold this (registrable) domain, if any."""
        host = extract_host(domain)
        if host is None:
            return None
        for entity, domains in self.entities.items():
            if any(host_matches(host, d.removeprefix("www.")) for d in domains):
                return entity
        return None

    def category(self, domain: str) -> str:
        entity = self.entity_of(domain)
        if entity is not None:
            return OWN if entity == self.brand else COMPETITOR
        key = domain.lower()
        if key in self.overrides:
            return self.overrides[key]
        return self.classification.listed(key) or UNCLASSIFIED


def classifier(
    *, brand: str, entities: Iterable[tuple[str, Iterable[str]]], overrides: Mapping[str, str]
) -> Classifier:
    hosts = {
        name: tuple(h for h in (extract_host(d) for d in domains) if h)
        for name, domains in entities
    }
    return Classifier(brand, hosts, dict(overrides), shipped())
