"""The ingest's scan of received EVENTS frames: a run of them checked and indexed where they were read, in one loop.

``_scan_events_py`` defines it; ``scan_events`` in ``_scan.c`` is its twin in C, used where it is built (and
``RINGTRACE_PURE_PYTHON`` is not set); the tests hold both to the same results.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Callable, Container
from typing import Final

from ringtrace.collector.store.segments import EVENTS_ENTRY
from ringtrace.wire.frames import EVENTS_HEADER, FRAME_HEADER, FrameType
from ringtrace.wire.optional_c import load_optional

__all__ = ["ACCELERATED", "scan_events"]

_scan = load_optional("ringtrace.collector.ingest._scan")
#: Whether the C scan is in use.
ACCELERATED: Final = _scan is not None

#: A frame header and an EVENTS header, as an EVENTS frame starts.
_EVENTS_FRAME_HEAD: Final = struct.Struct("<IBHHIIQQ")


def _scan_events_py(
    buf: bytearray | mmap.mmap, position: int, end: int, max_frame_bytes: int, tracks: Container[int], top: int
) -> tuple[bytes, int, dict[int, list[int]], int] | None:
    """``LendingFrameReader.events_run``'s loop (``scan_events`` in ``_scan.c`` is its twin in C)."""
    entries: list[bytes] = []
    sums: dict[int, list[int]] = {}
    events = 0
    unpack, pack, header = _EVENTS_FRAME_HEAD.unpack_from, EVENTS_ENTRY.pack, EVENTS_HEADER.size
    while end - position >= _EVENTS_FRAME_HEAD.size:
        body_length, frame_type, header_size, _, track, count, first_ts, last_ts = unpack(buf, position)
        size = FRAME_HEADER.size + body_length
        if (
            frame_type != FrameType.EVENTS
            or size > max_frame_bytes
            or size > end - position
            or not header <= header_size <= body_length
            or not 0 < count <= body_length - header_size
            or first_ts > last_ts
            or track not in tracks
            or position + size > top - EVENTS_ENTRY.size * (len(entries) + 1)
        ):
            break
        entries.append(pack(position, size, track, count, first_ts, last_ts))
        events += count
        total = sums.get(track)
        if total is None:
            sums[track] = [count, size]
        else:
            total[0] += count
            total[1] += size
        position += size
    if not entries:
        return None
    entries.reverse()
    return b"".join(entries), events, sums, position


#: The scan ``events_run`` runs: in C where it is built, else its Python twin.
scan_events: Callable[
    [bytearray | mmap.mmap, int, int, int, Container[int], int], tuple[bytes, int, dict[int, list[int]], int] | None
] = _scan_events_py if _scan is None else _scan.scan_events
