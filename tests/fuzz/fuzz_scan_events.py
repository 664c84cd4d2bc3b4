"""Fuzzing the collector's scan of EVENTS frames in C (``collector/ingest/_scan.c``, ``scan_events``) against its Python
twin (``scan._scan_events_py``, which defines it).

An input is a header of ``HEADER`` (where the scan starts and ends in the buffer, the frame size limit, the top of the
room for index entries, which tracks are known, and a rewrite of the buffer that the tracks' membership test makes,
as Python code between two frames may), then the buffer. ``check`` runs both on copies of the buffer and fails
unless they give the same result or raise the same error. ``scripts/fuzz`` runs it under atheris with the C module
built for coverage and AddressSanitizer; the tests run every input of ``corpus/scan_events/`` through ``check``.
"""

from __future__ import annotations

import struct
import sys
from typing import Any

from ringtrace.collector.ingest.scan import _scan_events_py
from ringtrace.wire.optional_c import load_optional

#: position, end, max_frame_bytes, top, its shift, known tracks (bits 0-7), rewrite offset, rewrite bytes (4)
HEADER = struct.Struct("<HHIqBBH4s")
#: The C scan, when built (and ``RINGTRACE_PURE_PYTHON`` is not set).
scan_c = load_optional("ringtrace.collector.ingest._scan")


class Tracks:
    """The tracks whose bit is set in ``known``; each membership test writes ``rewrite`` at ``offset`` (the same
    bytes each time, so that C, which asks once per run of a track, and Python, which asks per frame, see the same
    buffer)."""

    def __init__(self, buffer: bytearray, known: int, offset: int, rewrite: bytes) -> None:
        self.buffer, self.known, self.offset, self.rewrite = buffer, known, offset, rewrite

    def __contains__(self, track: object) -> bool:
        if self.offset < len(self.buffer):
            self.buffer[self.offset : self.offset + len(self.rewrite)] = self.rewrite[: len(self.buffer) - self.offset]
        return isinstance(track, int) and 0 <= track < 8 and bool(self.known >> track & 1)


def scan(function: Any, data: bytes) -> Any:
    position, end, max_frame_bytes, top, shift, known, offset, rewrite = HEADER.unpack_from(data)
    buffer = bytearray(data[HEADER.size :])
    position %= len(buffer) + 1
    end = position + end % (len(buffer) - position + 1)
    offset = offset if offset < len(buffer) else len(buffer)  # past the end: no rewrite
    try:
        return function(buffer, position, end, max_frame_bytes, Tracks(buffer, known, offset, rewrite), top >> shift)
    except Exception as error:  # the same refusal, from both
        return type(error)


def check(data: bytes) -> None:
    """Fail (AssertionError) unless scan_events in C and in Python make the same of the input ``data``."""
    if scan_c is None or len(data) <= HEADER.size:
        return
    fast, slow = scan(scan_c.scan_events, data), scan(_scan_events_py, data)
    assert fast == slow, (fast, slow)


def main() -> None:
    import atheris  # only where fuzzing: the tests run check() without it

    atheris.Setup(sys.argv, check)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
