"""A collected answer's searches (query fan-out) and its found-but-not-cited sources are
recorded with the capture, as rows carrying their sample's identity, and shown on the
sample's console page."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from connectors.registry import adapter_class
from evidence.models import Citation, EvidenceKind, SearchQuery
from evidence.services import read_object
from sampling.models import Sample
from simulator import SimulatorHandle
from tests.evidence.helpers import OPENAI, collected_run, record_result, result

pytestmark = pytest.mark.django_db


def test_an_openai_answer_records_its_searches_and_the_sources_it_did_not_cite(
    simulator: SimulatorHandle, local_storage: Any, admin_client: Client
) -> None:
    run = collected_run(OPENAI)
    sample = Sample.objects.get(run=run)
    capture = sample.captures.get(collection_state="completed")
    raw = capture.evidence_objects.get(kind=EvidenceKind.RAW)
    parsed = adapter_class("openai").parse(read_object(key=raw.key), content_type=raw.mime)
    assert parsed.search_queries and parsed.found  # the simulator serves both

    queries = SearchQuery.objects.filter(capture=capture).order_by("position")
    assert [q.query for q in queries] == parsed.search_queries
    assert {(q.run_id, q.sample_id, q.platform, q.question_revision_id) for q in queries} == {
        (run.pk, sample.pk, "openai", sample.question_revision_id)
    }
    rows = list(Citation.objects.filter(capture=capture).order_by("position"))
    cited = [c.normalized_url for c in rows if c.role == "cited"]
    found = [c.normalized_url for c in rows if c.role == "found"]
    assert cited == [c.normalized_url for c in parsed.citations]
    assert found == [c.normalized_url for c in parsed.found]
    assert [c.position for c in rows] == list(range(len(rows)))  # found ones numbered on

    page = admin_client.get(reverse("admin:sampling_sample_change", args=[sample.pk]))
    html = page.content.decode()
    assert "searches the engine ran" in html.lower()
    assert all(q in html for q in parsed.search_queries)
    assert "Found, not cited" in html and "Cited in the answer" in html


def test_a_result_without_searches_records_no_rows_and_says_so(
    simulator: SimulatorHandle, local_storage: Any, admin_client: Client
) -> None:
    run = collected_run(OPENAI)
    sample = Sample.objects.get(run=run)
    capture = record_result(sample, result("Acme.", [("https://acme.com/", "Acme")]))
    assert not SearchQuery.objects.filter(capture=capture).exists()
    assert list(Citation.objects.filter(capture=capture).values_list("role", flat=True)) == [
        "cited"
    ]
    html = admin_client.get(reverse("admin:sampling_sample_change", args=[sample.pk]))
    assert "no searches reported" in html.content.decode()
