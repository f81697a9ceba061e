"""Screenshots: an evidence page for direct-API answers, and thumbnails (docs/architecture.md).

Direct model APIs return text, not pixels. When a target asks for a screenshot, the captured
answer and its citations are rendered as a self-contained HTML page (the sanitised display
copy; every other string escaped) and photographed by headless Chromium (Debian's
`/usr/bin/chromium`) run as a subprocess with a timeout.

Nothing remote is ever loaded: the page has a Content-Security-Policy of `default-src 'none'`
(inline style only, no scripts, no images, no fonts, no frames), the sanitiser has already
removed images and active content, and Chromium runs with background networking off and a
host resolver that resolves nothing. Without a browser, or if rendering fails, the caller
gets `ScreenshotUnavailable(reason)`; the sample's evidence is then partial with reason
SCREENSHOT_UNAVAILABLE and the answer still counts.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.template.loader import render_to_string
from django.utils.safestring import mark_safe

from .models import Capture, CitationRole
from .sanitize import render_display_html

__all__ = [
    "SCREENSHOT_UNAVAILABLE",
    "PageCitation",
    "ScreenshotUnavailable",
    "chromium_binary",
    "make_thumbnail",
    "render_answer_html",
    "render_answer_page",
    "render_html_to_png",
]

SCREENSHOT_UNAVAILABLE = "SCREENSHOT_UNAVAILABLE"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--hide-scrollbars",
    "--mute-audio",
    "--deny-permission-prompts",
    # Defence in depth: even if something tried, no host name resolves.
    "--host-resolver-rules=MAP * ~NOTFOUND",
)
PAGE_WIDTH = 1024


class ScreenshotUnavailable(Exception):
    """No screenshot could be made; `reason` says why (for the sample's evidence_reason)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class PageCitation:
    url: str
    title: str = ""


def chromium_binary() -> str | None:
    """The Chromium to use: GEO_CHROMIUM_PATH, else `chromium` on PATH; None if absent."""
    configured = getattr(settings, "GEO_CHROMIUM_PATH", None) or os.environ.get("GEO_CHROMIUM_PATH")
    if configured:
        return configured if Path(configured).exists() else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


def render_answer_html(
    *,
    answer_text: str,
    citations: Sequence[PageCitation],
    platform: str,
    question: str,
    captured_at: str,
    reference: str,
) -> str:
    """The self-contained evidence page (no external resources)."""
    return render_to_string(
        "evidence/answer_page.html",
        {
            # render_display_html: Markdown -> HTML (raw HTML escaped) -> nh3 allow-list.
            "answer_html": mark_safe(render_display_html(answer_text)),  # noqa: S308
            "citations": citations,
            "platform": platform,
            "question": question,
            "captured_at": captured_at,
            "reference": reference,
            "width": PAGE_WIDTH,
        },
    )


def _page_height(html: str, n_citations: int) -> int:
    # Chromium photographs the viewport; size it to the content, within bounds.
    estimate = 320 + (len(html) // 90) * 22 + n_citations * 48
    return max(600, min(estimate, int(getattr(settings, "GEO_SCREENSHOT_MAX_HEIGHT", 8000))))


def render_html_to_png(html: str, *, height: int = 1200, timeout: float | None = None) -> bytes:
    """Photograph an HTML document with headless Chromium. Raises ScreenshotUnavailable."""
    binary = chromium_binary()
    if binary is None:
        raise ScreenshotUnavailable("SCREENSHOT_UNAVAILABLE: no Chromium installed")
    limit = timeout or float(getattr(settings, "GEO_SCREENSHOT_TIMEOUT_SECONDS", 30))
    with tempfile.TemporaryDirectory(prefix="geo-shot-") as tmp:
        page = Path(tmp) / "page.html"
        out = Path(tmp) / "shot.png"
        page.write_text(html, encoding="utf-8")
        command = [
            binary,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={Path(tmp) / 'profile'}",
            f"--window-size={PAGE_WIDTH},{height}",
            f"--screenshot={out}",
            page.as_uri(),
        ]
        try:
            subprocess.run(
                command,
                check=False,
                capture_output=True,
                timeout=limit,
                cwd=tmp,
                env={**os.environ, "HOME": tmp},
            )
        except subprocess.TimeoutExpired as error:
            raise ScreenshotUnavailable(
                f"SCREENSHOT_UNAVAILABLE: Chromium timed out after {limit:g}s"
            ) from error
        except OSError as error:
            raise ScreenshotUnavailable(f"SCREENSHOT_UNAVAILABLE: {error}") from error
        data = out.read_bytes() if out.exists() else b""
    if not data.startswith(PNG_SIGNATURE):
        raise ScreenshotUnavailable("SCREENSHOT_UNAVAILABLE: Chromium produced no image")
    return data


def render_answer_page(*, capture_id: int) -> bytes:
    """PNG of the evidence page for one capture (answer and citations as captured)."""
    capture = (
        Capture.objects.select_related("sample__question_revision")
        .prefetch_related("citations")
        .get(pk=capture_id)
    )
    sample = capture.sample
    citations = [
        PageCitation(url=c.url, title=c.title)
        for c in capture.citations.all()
        if c.role == CitationRole.CITED  # the answer's citations, not what the search found
    ]
    html = render_answer_html(
        answer_text=capture.answer_text,
        citations=citations,
        platform=f"{sample.platform} · {sample.device} · {sample.region} · {sample.mode}",
        question=sample.question_revision.text,
        captured_at=capture.captured_at.isoformat(),
        reference=f"sample {sample.pk}, capture revision {capture.revision}",
    )
    return render_html_to_png(html, height=_page_height(capture.answer_text, len(citations)))


def make_thumbnail(image: bytes, *, max_width: int | None = None) -> bytes:
    """A PNG thumbnail (aspect kept, at most `max_width` wide and 3x that tall).

    Raises ValueError for bytes that are not a readable image.
    """
    from PIL import Image, UnidentifiedImageError

    width = max_width or int(getattr(settings, "GEO_THUMBNAIL_WIDTH", 320))
    try:
        with Image.open(io.BytesIO(image)) as source:
            source.load()
            copy = source.convert("RGBA") if source.mode not in ("RGB", "RGBA") else source.copy()
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as error:
        raise ValueError(f"not a readable image: {error}") from error
    copy.thumbnail((width, width * 3), Image.Resampling.LANCZOS)
    out = io.BytesIO()
    copy.save(out, format="PNG", optimize=True)
    return out.getvalue()
