"""The evidence page renderer (headless Chromium) and its failure mode."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest
from PIL import Image

from evidence.models import Capture
from evidence.screenshots import (
    ScreenshotUnavailable,
    chromium_binary,
    make_thumbnail,
    render_answer_page,
)
from sampling.models import Sample
from simulator import SimulatorHandle
from tests.evidence.helpers import OPENAI, collected_run, record_result, result
from tests.services import QuietHandler, loopback_server

pytestmark = pytest.mark.django_db
needs_chromium = pytest.mark.skipif(chromium_binary() is None, reason="needs Debian's chromium")


@pytest.fixture
def canary() -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server that records every request: nothing may reach it."""
    hits: list[str] = []

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.reply(200)

    with loopback_server(Handler) as url:
        yield url, hits


@needs_chromium
def test_renders_the_captured_answer_without_loading_anything(
    simulator: SimulatorHandle, local_storage: Any, canary: tuple[str, list[str]]
) -> None:
    base, hits = canary
    run = collected_run(OPENAI)
    sample = Sample.objects.get(run=run)
    hostile = (
        f'**Acme** is good. ![pixel]({base}/md-image.png) <img src="{base}/raw-img.png">\n\n'
        f'<link rel="stylesheet" href="{base}/style.css"><script src="{base}/x.js"></script>'
        f'<iframe src="{base}/frame"></iframe> <a href="{base}/link">link</a>'
    )
    capture = record_result(sample, result(hostile, [(f"{base}/cited?utm_source=x", "cited")]))

    png = render_answer_page(capture_id=capture.pk)

    image = Image.open(io.BytesIO(png))
    assert image.format == "PNG" and image.width == 1024
    assert hits == []  # no request left the page
    thumbnail = Image.open(io.BytesIO(make_thumbnail(png)))
    assert thumbnail.width == 320 and thumbnail.height < image.height


def test_without_a_browser_the_screenshot_is_unavailable(
    simulator: SimulatorHandle, local_storage: Any, settings: Any
) -> None:
    run = collected_run(OPENAI)
    capture = Capture.objects.get(sample__run=run)
    settings.GEO_CHROMIUM_PATH = "/nonexistent/chromium"
    with pytest.raises(ScreenshotUnavailable) as missing:
        render_answer_page(capture_id=capture.pk)
    assert missing.value.reason.startswith("SCREENSHOT_UNAVAILABLE")


def test_a_browser_that_draws_nothing_is_unavailable_too(
    simulator: SimulatorHandle, local_storage: Any, settings: Any, tmp_path: Any
) -> None:
    fake = tmp_path / "chromium"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    settings.GEO_CHROMIUM_PATH = str(fake)
    run = collected_run(OPENAI)
    capture = Capture.objects.get(sample__run=run)
    with pytest.raises(ScreenshotUnavailable, match="produced no image"):
        render_answer_page(capture_id=capture.pk)


def test_thumbnail_rejects_what_is_not_an_image() -> None:
    with pytest.raises(ValueError, match="not a readable image"):
        make_thumbnail(b"\x89PNG\r\n\x1a\nbroken")
