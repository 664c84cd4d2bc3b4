"""A real browser for the web view's tests: the system's Chromium (Debian's ``chromium``), driven by Playwright, which
is pointed at it and downloads no browser of its own. Where either is missing, ``launch_args`` says why (the tests skip
with that reason); ``until`` waits on a condition in a page; ``pixels`` reads a screenshot's PNG back (no imaging
library needed)."""

from __future__ import annotations

import shutil
import struct
import zlib
from dataclasses import dataclass
from typing import Any

from waiting import wait_for

#: Debian's chromium package installs it here; scripts/check installs it where it can.
CHROMIUM = "/usr/bin/chromium"
#: Headless, as root in CI, and nothing that would reach beyond the collector (updates, sync, QUIC probes).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def missing_browser() -> str | None:
    """Why no browser test can run here, or None."""
    if shutil.which(CHROMIUM) is None:
        return f"no Chromium at {CHROMIUM} (apt-get install chromium; scripts/check installs it as root)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed (the test extra: pip install -e '.[test]')"
    return None


def until(page: Any, script: str, arg: Any = None, timeout_s: float = 30.0) -> Any:
    """Evaluate ``script`` (a JavaScript function of ``arg``) in the page until it returns something true, and return
    that. Polled from here: the page's Content-Security-Policy forbids the eval that Playwright's own
    ``wait_for_function`` runs in the page."""
    return wait_for(lambda: page.evaluate(script, arg), timeout_s=timeout_s, what=f"true in the page: {script}")


@dataclass(frozen=True)
class Image:
    """An RGB(A) image: ``rows[y][x * channels + c]``."""

    width: int
    height: int
    channels: int
    rows: list[bytes]

    def pixel(self, x: int, y: int) -> tuple[int, int, int]:
        start = x * self.channels
        r, g, b = self.rows[y][start : start + 3]
        return r, g, b

    def count(self, box: tuple[int, int, int, int], keep: object) -> int:
        """How many pixels in ``box`` (x0, y0, x1, y1) ``keep(rgb)`` accepts."""
        x0, y0, x1, y1 = box
        return sum(1 for y in range(y0, y1) for x in range(x0, x1) if keep(self.pixel(x, y)))  # type: ignore[operator]


def pixels(png: bytes) -> Image:
    """Decode an 8-bit, non-interlaced RGB or RGBA PNG (what a Chromium screenshot is)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    offset, data = 8, b""
    width = height = channels = 0
    while offset < len(png):
        (length,) = struct.unpack(">I", png[offset : offset + 4])
        kind = png[offset + 4 : offset + 8]
        body = png[offset + 8 : offset + 8 + length]
        offset += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0 and colour in (2, 6), (depth, colour, interlace)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            data += body
    raw = zlib.decompress(data)
    stride = width * channels
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        line = raw[y * (stride + 1) : (y + 1) * (stride + 1)]
        row = _unfilter(line[0], bytearray(line[1:]), previous, channels)
        rows.append(bytes(row))
        previous = row
    return Image(width, height, channels, rows)


def _unfilter(kind: int, row: bytearray, above: bytearray, bpp: int) -> bytearray:
    for i in range(len(row)):
        left = row[i - bpp] if i >= bpp else 0
        up = above[i]
        corner = above[i - bpp] if i >= bpp else 0
        if kind == 1:
            row[i] = (row[i] + left) & 0xFF
        elif kind == 2:
            row[i] = (row[i] + up) & 0xFF
        elif kind == 3:
            row[i] = (row[i] + (left + up) // 2) & 0xFF
        elif kind == 4:
            p = left + up - corner
            pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
            predictor = left if pa <= pb and pa <= pc else up if pb <= pc else corner
            row[i] = (row[i] + predictor) & 0xFF
    return row
