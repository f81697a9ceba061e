"""Archiving: keys, digests, revisions, thumbnails, citations, never overwriting."""

from __future__ import annotations

import hashlib
import io
from typing import Any

import pytest
from PIL import Image

from connectors.base import Attachment
from evidence import services
from evidence.models import Capture, EvidenceObject
from evidence.storage import evidence_storage
from sampling.models import Sample
from simulator import SimulatorHandle
from tests.evidence.helpers import COLLECTOR, OPENAI, collected_run, record_result, result

pytestmark = pytest.mark.django_db


def _png(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


def _stored(key: str) -> bytes:
    with evidence_storage().open(key, "rb") as handle:
        data: bytes = handle.read()
    return data


def test_provider_screenshot_is_kept_at_full_size_with_a_separate_thumbnail(
    simulator: SimulatorHandle, local_storage: Any
) -> None:
    run = collected_run(COLLECTOR)
    sample = Sample.objects.get(run=run)
    capture = Capture.objects.get(sample=sample)
    objects = {o.kind: o for o in capture.evidence_objects.all()}
    assert {"raw", "text", "screenshot", "thumbnail"} <= set(objects)
    for kind, obj in objects.items():
        assert obj.key == f"acme/{run.pk}/{sample.pk}/{capture.revision}/{kind}"
        assert obj.revision == capture.revision
        data = _stored(obj.key)
        assert hashlib.sha256(data).hexdigest() == obj.sha256 and len(data) == obj.size
    original = Image.open(io.BytesIO(_stored(objects["screenshot"].key)))
    thumb = Image.open(io.BytesIO(_stored(objects["thumbnail"].key)))
    assert objects["thumbnail"].mime == "image/png"
    assert thumb.width == min(320, original.width)
    assert objects["screenshot"].sha256 != objects["thumbnail"].sha256


def test_citations_keep_original_normalized_and_registrable_domain(
    simulator: SimulatorHandle, local_storage: Any
) -> None:
    run = collected_run(OPENAI)
    sample = Sample.objects.get(run=run)
    url = "https://News.BBC.co.uk/a/b?utm_source=chatgpt.com&id=5&gclid=X&page=2&fbclid=Y&spm=a.b"
    capture = record_result(
        sample, result("Acme is fine.", [(url, "BBC"), ("https://alice.github.io/x?q=1", "")])
    )
    first, second = capture.citations.order_by("position")
    assert first.url == url  # as received
    assert first.normalized_url == "https://news.bbc.co.uk/a/b?id=5&page=2"
    assert first.domain == "bbc.co.uk"  # eTLD+1 from the offline public-suffix list
    assert second.normalized_url == "https://alice.github.io/x?q=1"
    assert second.domain == "alice.github.io"  # private suffix honoured


def test_a_broken_screenshot_does_not_stop_the_capture(
    simulator: SimulatorHandle, local_storage: Any
) -> None:
    run = collected_run(OPENAI)
    sample = Sample.objects.get(run=run)
    capture = record_result(
        sample,
        result("Acme.", attachments=[Attachment("screenshot", b"not an image", "image/png")]),
    )
    kinds = set(capture.evidence_objects.values_list("kind", flat=True))
    assert "screenshot" in kinds and "thumbnail" not in kinds
    assert services.THUMBNAIL_UNAVAILABLE in capture.warnings


def test_store_screenshot_adds_to_a_capture_and_never_replaces(
    simulator: SimulatorHandle, local_storage: Any
) -> None:
    run = collected_run(OPENAI, screenshot_policy="none")
    sample = Sample.objects.get(run=run)
    capture = Capture.objects.get(sample=sample)
    assert not capture.evidence_objects.filter(kind="screenshot").exists()

    stored = services.store_screenshot(
        sample_id=sample.pk, capture_id=capture.pk, png=_png(1024, 2000)
    )
    assert {o.kind for o in stored} == {"screenshot", "thumbnail"}
    shot = EvidenceObject.objects.get(capture=capture, kind="screenshot")
    assert shot.revision == capture.revision
    assert Image.open(io.BytesIO(_stored(shot.key))).size == (1024, 2000)  # original resolution
    thumb = EvidenceObject.objects.get(capture=capture, kind="thumbnail")
    assert Image.open(io.BytesIO(_stored(thumb.key))).width == 320

    with pytest.raises(services.EvidenceExists):
        services.store_screenshot(sample_id=sample.pk, capture_id=capture.pk, png=_png(10, 10))
    again = EvidenceObject.objects.get(capture=capture, kind="screenshot")
    assert (again.key, again.sha256) == (shot.key, shot.sha256)
    assert hashlib.sha256(_stored(shot.key)).hexdigest() == shot.sha256


def test_a_repair_is_a_new_revision_and_the_old_objects_stay(
    simulator: SimulatorHandle, local_storage: Any
) -> None:
    run = collected_run(OPENAI)
    sample = Sample.objects.get(run=run)
    before = {(o.key, o.sha256) for o in EvidenceObject.objects.filter(capture__sample=sample)}
    capture, _ = services.reparse_sample(sample_id=sample.pk)
    assert capture.revision == 2
    after = {(o.key, o.sha256) for o in EvidenceObject.objects.filter(capture__sample=sample)}
    assert before < after
    assert all(f"/{sample.pk}/2/" in key for key, _ in after - before)
    for key, sha in before:
        assert hashlib.sha256(_stored(key)).hexdigest() == sha


def test_a_first_capture_replaces_none_and_a_later_completed_one_replaces_it(
    simulator: SimulatorHandle, local_storage: Any
) -> None:
    run = collected_run(OPENAI)
    sample = Sample.objects.get(run=run)
    first = Capture.objects.get(sample=sample)
    assert (first.revision, first.supersedes_id) == (1, None)
    second, _ = services.reparse_sample(sample_id=sample.pk)
    assert (second.revision, second.supersedes_id) == (2, first.pk)
