"""Secrets never reach a stored or logged message.

Every connector configuration registers its API key (and proxy passwords) here when it is
built; `redact` replaces each registered secret in a text. Upstream error messages pass
through it when an UpstreamError or a result error is made, so an upstream that echoes the
key back ("invalid key sk-...") stores `[redacted]` instead.
"""

from __future__ import annotations

from urllib.parse import urlsplit

REDACTED = "[redacted]"
# Shorter values would redact ordinary words; real keys and passwords are longer.
MIN_SECRET_CHARS = 6

_secrets: set[str] = set()


def register_secret(value: str | None) -> None:
    if value and len(value) >= MIN_SECRET_CHARS:
        _secrets.add(value)


def register_proxy(proxy: str | None) -> None:
    """A proxy URL's password is as secret as an API key."""
    if proxy:
        register_secret(urlsplit(proxy).password)


def redact(text: str, extra: tuple[str, ...] = ()) -> str:
    # Longest first, so a secret containing another is replaced whole.
    for secret in sorted(_secrets.union(s for s in extra if s), key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text
