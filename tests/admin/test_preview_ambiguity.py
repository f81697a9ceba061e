"""The plan preview warns about aliases that are common words until the campaign marks them."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from analysis.models import AmbiguousWord
from tests.admin.conftest import make_campaign


@pytest.mark.django_db
def test_preview_warns_about_an_unmarked_common_word_alias(admin_client: Client) -> None:
    campaign = make_campaign()  # Globex has the alias 环球 ("around the world")
    url = reverse("admin:sampling_campaign_preview", args=[campaign.pk])

    page = admin_client.get(url).content.decode()
    assert escape("Alias '环球' of Globex is a common word") in page

    AmbiguousWord.objects.create(campaign=campaign, entity="Globex", word="环球")
    page = admin_client.get(url).content.decode()
    assert "is a common word" not in page
