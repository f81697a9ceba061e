"""Small valid PNG screenshots from the standard library only (zlib + struct)."""

from __future__ import annotations

import struct
import zlib
from functools import lru_cache

VIEWPORTS = {"mobile": (390, 844), "desktop": (1280, 800)}


def _chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


@lru_cache(maxsize=16)
def solid_png(
    width: int, height: int, rgb: tuple[int, int, int], bar: tuple[int, int, int] = (32, 32, 32)
) -> bytes:
    """An RGB image of one colour with a darker top bar (a browser chrome, roughly)."""
    bar_rows = max(1, height // 14)
    bar_row = b"\x00" + bytes(bar) * width  # filter byte 0 (None) + pixels
    body_row = b"\x00" + bytes(rgb) * width
    pixels = bar_row * bar_rows + body_row * (height - bar_rows)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(pixels, 9))
        + _chunk(b"IEND", b"")
    )


def png_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR."""
    if not data.startswith(b"\x89PNG\r\n\x1a\n") or data[12:16] != b"IHDR":
        raise ValueError("not a PNG")
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def screenshot_png(device: str, rgb: tuple[int, int, int] = (245, 245, 250)) -> bytes:
    width, height = VIEWPORTS.get(device, VIEWPORTS["desktop"])
    return solid_png(width, height, rgb)
