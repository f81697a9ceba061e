"""Real-browser tests: Debian's chromium driven by Playwright against the live server, on
loopback only (no browser download)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from evidence.screenshots import CHROMIUM_FLAGS

CHROMIUM = Path("/usr/bin/chromium")
# The headless basics the evidence renderer starts chromium with, without its rule that no host
# name resolves: these tests talk to the live server by name.
CHROMIUM_ARGS = [flag for flag in CHROMIUM_FLAGS[:7] if flag.startswith("--")]

needs_browser = [
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium"
    ),
    pytest.mark.skipif(
        importlib.util.find_spec("playwright") is None,
        reason="needs the playwright package (pip install playwright; no browser download)",
    ),
]


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless chromium, closed on the way out."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def log_in(page: Any, url: str, username: str, password: str) -> None:
    """Open `url` (the login page, or a page that sends there) and sign in."""
    page.goto(url)
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")
