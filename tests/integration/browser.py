"""A real browser for the web view's tests: the system's Chromium (Debian's ``chromium``), driven by Playwright, which
is pointed at it and downloads no browser of its own. Where either is missing, ``launch_args`` says why (the tests skip
with that reason); ``until`` waits on a condition in a page; ``pixels`` reads a screenshot's PNG back (no imaging
library needed); ``chromium`` launches it, and ``KEEP_DRAWN_TEXT`` keeps what a page draws on a canvas."""

from __future__ import annotations

import contextlib
import shutil
import struct
import zlib
from collections.abc import Iterator
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


#: Keeps each text the page draws on a canvas in ``window.drawnText`` (Perfetto UI draws its flame graph on one).
KEEP_DRAWN_TEXT = """
window.drawnText = [];
const fillText = CanvasRenderingContext2D.prototype.fillText;
CanvasRenderingContext2D.prototype.fillText = function (text, ...at) {
  window.drawnText.push(String(text));
  return fillText.call(this, text, ...at);
};
"""


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """The system's Chromium, launched headless by Playwright (``missing_browser`` says whether it can be), closed at
    the end."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


#: Playwright's own deadline for each action (a click, a read of the page), in ms: its default, 30 s, is what a page
#: busy drawing 150,000 frames took on a loaded CI machine.
ACTION_TIMEOUT_MS = 120_000


def generous(target: Any) -> Any:
    """``target`` (a page or a browser context) with ``ACTION_TIMEOUT_MS`` as its actions' deadline."""
    target.set_default_timeout(ACTION_TIMEOUT_MS)
    return target


def until(page: Any, script: str, arg: Any = None, timeout_s: float = 60.0) -> Any:
    """Evaluate ``script`` (a JavaScript function of ``arg``) in the page until it returns something true, and return
    that. Polled from here: the page's Content-Security-Policy forbids the eval that Playwright's own
    ``wait_for_function`` runs in the page."""
    return wait_for(lambda: page.evaluate(script, arg), timeout_s=timeout_s, what=f"true in the page: {script}")


def uncheck_follow(page: Any, timeout_s: float = 60.0) -> None:
    """Untick the page's "follow live" as a user does (a click), again while the click did not take (Playwright's
    "did not change its state": on a busy machine the renderer can drop a click that lands mid-draw)."""

    def clicked() -> bool:
        if page.is_checked("#follow"):
            try:
                page.uncheck("#follow", timeout=timeout_s * 1000)
            except Exception as exc:  # (playwright's Error: the click did not change the box)
                if "did not change its state" not in str(exc):
                    raise
        return not page.is_checked("#follow")

    wait_for(clicked, timeout_s=timeout_s, what='"follow live" unticked by a click')


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
        c = self.channels
        return sum(
            1
            for row in self.rows[y0:y1]
            for rgb in zip(
                row[x0 * c : x1 * c : c], row[x0 * c + 1 : x1 * c : c], row[x0 * c + 2 : x1 * c : c], strict=True
            )
            if keep(rgb)  # type: ignore[operator]
        )


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
    """Undo a PNG row's filter (``kind``), given the row above it unfiltered. One loop per kind, and none for what
    needs none: decoding a screenshot is most of a browser test's own CPU time."""
    if kind == 0:
        return row
    if kind == 2:  # up: bytewise (row + above) mod 256, all at once in one big integer (no carry between bytes)
        a, b = int.from_bytes(row, "big"), int.from_bytes(above, "big")
        high = int.from_bytes(b"\x80" * len(row), "big")
        low = int.from_bytes(b"\x7f" * len(row), "big")
        return bytearray((((a & low) + (b & low)) ^ ((a ^ b) & high)).to_bytes(len(row), "big"))
    n = len(row)
    if kind == 1:  # sub
        for i in range(bpp, n):
            row[i] = (row[i] + row[i - bpp]) & 0xFF
    elif kind == 3:  # average
        for i in range(bpp):
            row[i] = (row[i] + above[i] // 2) & 0xFF
        for i in range(bpp, n):
            row[i] = (row[i] + (row[i - bpp] + above[i]) // 2) & 0xFF
    elif kind == 4:  # Paeth
        for i in range(bpp):
            row[i] = (row[i] + above[i]) & 0xFF  # (left and corner are 0: the predictor is up)
        for i in range(bpp, n):
            left, up, corner = row[i - bpp], above[i], above[i - bpp]
            pa, pb = abs(up - corner), abs(left - corner)
            pc = abs(left + up - corner - corner)
            row[i] = (row[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
    return row
