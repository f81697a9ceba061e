"""An unfunded tenant: the preview says plainly that funds are short and offers no launch."""

from __future__ import annotations

import copy

import pytest
from django.test import Client
from django.urls import reverse

from sampling.services import save_campaign
from tests.conftest import BASE_CAMPAIGN, spec_with_tenant

pytestmark = pytest.mark.django_db


def test_the_preview_says_funds_are_short_and_offers_no_launch(admin_client: Client) -> None:
    campaign = save_campaign(spec=spec_with_tenant(copy.deepcopy(BASE_CAMPAIGN)))
    page = admin_client.get(reverse("admin:sampling_campaign_preview", args=[campaign.pk]))
    html = page.content.decode()
    assert 'id="available-balance">0.00 USD<' in html
    assert "Not enough funds: this launch needs 0.20 USD but acme has 0.00 USD available" in html
    assert "(short by 0.20 USD)" in html
    assert 'name="token"' not in html
