"""The category of a cited domain: the campaign's own and competitor domains, then the
tenant's overrides (edited in the console, tenant-scoped), then the shipped versioned
classification and its suffix rules, else unclassified."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from evidence.categories import CATEGORIES, DATA_FILE, LISTED, classifier, shipped
from evidence.models import DomainCategory
from tenancy.models import Tenant
from tests.evidence.helpers import user


def _classes(overrides: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    entities = [("Acme", ["acme.com", "www.acme.co.uk"]), ("Globex", ["globex.com"])]
    return classifier(brand="Acme", entities=entities, overrides=overrides or {})


def test_the_shipped_classification_is_versioned_and_uses_only_known_categories() -> None:
    data = json.loads(DATA_FILE.read_text(encoding="utf-8"))
    assert data["version"] == shipped().version
    assert set(data["domains"].values()) | set(data["suffixes"].values()) <= LISTED
    assert set(CATEGORIES) - {"own", "competitor"} == LISTED


def test_campaign_domains_come_first_then_overrides_then_the_file() -> None:
    classes = _classes({"g2.com": "editorial", "acme.com": "social"})
    assert classes.category("acme.com") == "own"  # the brand's, whatever the override says
    assert classes.category("acme.co.uk") == "own"  # the brand's www.acme.co.uk, without www.
    assert classes.category("notacme.com") == "unclassified"  # a label boundary, not a suffix
    assert classes.category("globex.com") == "competitor"
    assert classes.category("g2.com") == "editorial"  # the tenant's override
    assert classes.category("capterra.com") == "reviews"  # the shipped file
    assert classes.category("wikipedia.org") == "reference"
    assert classes.category("mit.edu") == "institutional"  # a suffix rule
    assert classes.category("ox.ac.uk") == "institutional"
    assert classes.category("example.org") == "unclassified"
    assert classes.entity_of("globex.com") == "Globex"


@pytest.mark.django_db
def test_an_override_is_stored_by_registrable_domain_and_scoped_to_its_tenant() -> None:
    operator = user("op", tenant="alpha", role="operator")
    client = Client()
    client.force_login(operator)
    alpha = Tenant.objects.get(slug="alpha")
    response = client.post(
        reverse("admin:evidence_domaincategory_add"),
        {"tenant": alpha.pk, "domain": "https://News.Example.co.uk/a", "category": "editorial",
         "note": ""},
    )  # fmt: skip
    assert response.status_code == 302, response.content.decode()[:2000]
    override = DomainCategory.objects.get()
    assert (override.tenant_id, override.domain) == (alpha.pk, "example.co.uk")

    other = user("other", tenant="beta", role="analyst")
    client.force_login(other)
    url = reverse("admin:evidence_domaincategory_change", args=[override.pk])
    assert client.get(url).status_code == 404  # another tenant's row is not there
    listing = client.get(reverse("admin:evidence_domaincategory_changelist"))
    assert listing.status_code == 200 and "example.co.uk" not in listing.content.decode()
