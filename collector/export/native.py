"""Snapshots as snapshot files (``format=native``, ``wire/PROTOCOL.md``, "Snapshot file"): a stream per stored
segment that holds selected events, end to end, as a stream of chunks (one a segment).

Pure functions over what the frame walk reads (``read/frame_walk.py``): no asyncio, safe to run on a worker thread while
ingest goes on. Each stream is the segment's session frames and its EVENTS frames that hold selected events, byte for
byte (a frame whose times lie in the window is not decoded), or re-encoded with only those where a filter chooses among
a frame's events; the frames a file has no use for (FLUSH, FLUSH_ACK, GOODBYE, CHECKSUM) are left out. A window keeps
the spans that overlap it, the points in it, and every paired event (marker, source activity, async begin and end) of
the frames read: a reader pairs them, and each pair that overlaps the window is there whole (``read/reach.py`` reads the
frames of both ends).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final

import msgpack
from ringtrace.collector.read.frame_walk import ProcessView, SnapshotView, prepare, taken_events
from ringtrace.collector.read.selection import EVERYTHING, EventFilter, Selection
from ringtrace.wire.decoder import SessionDecoder
from ringtrace.wire.frame_types import MAX_MAX_FRAME_BYTES
from ringtrace.wire.frames import Events, Frame, Stats, encode, preamble
from ringtrace.wire.handshake_frames import Hello
from ringtrace.wire.stack_frames import Stacks
from ringtrace.wire.table_frames import Schema, Strings, Track

__all__ = ["native_chunks"]

_PREAMBLE: Final = preamble()

#: What a frame of a segment becomes in its stream, by its type: its bytes, a part of them, or None (left out).
_Part = Callable[[ProcessView, SessionDecoder, Frame, Selection | None], bytes | None]


def native_chunks(view: SnapshotView, selected: EventFilter = EVERYTHING) -> Iterator[bytes]:
    """Yield a snapshot file holding the events ``selected``: one chunk per segment walked (b"" for a segment with
    nothing selected: the reader may hand over its step all the same)."""
    walk, selection = prepare(view, selected, pairs=True)
    written = False
    for process, frames in walk.segment_frames():
        stream = _stream(process, frames, selection)
        written = written or bool(stream)
        yield stream
    if not written:
        yield _PREAMBLE  # a snapshot file of no stream: readers take it as such, not as a file of no known format


def _stream(process: ProcessView, frames: Iterator[tuple[SessionDecoder, Frame]], selection: Selection | None) -> bytes:
    """One segment's stream, or b"" if it holds no selected event (its frames are read in full all the same: what
    breaks in it is counted by the walk)."""
    parts = [_PREAMBLE]
    kept = 0
    for decoder, frame in frames:
        part_of = _PARTS.get(type(frame))
        part = part_of(process, decoder, frame, selection) if part_of is not None else None
        if part is not None:
            parts.append(part)
            kept += type(frame) is Events
    return b"".join(parts) if kept else b""


def _as_stored(process: ProcessView, decoder: SessionDecoder, frame: Frame, selection: Selection | None) -> bytes:
    return bytes(decoder.last_frame())


def _selected_part(
    process: ProcessView, decoder: SessionDecoder, frame: Frame, selection: Selection | None
) -> bytes | None:
    """An EVENTS frame, or one with only its selected events (None if it has none)."""
    assert isinstance(frame, Events)
    if selection is None or _whole(process, frame, selection):
        return bytes(decoder.last_frame())
    tables = decoder.tables
    taken = taken_events(process, tables, frame, selection)
    if taken is None or len(taken) == frame.count:
        return bytes(decoder.last_frame())  # (one that cannot be decoded is stored as it came: a reader counts it)
    if not taken:
        return None
    columns = tables.unpack(frame)
    kept = [[column[index] for index, _, _ in taken] for column in columns]
    first_ns = min(start for _, start, _ in taken)
    kept[tables.columns.index("ts")] = [start - first_ns for _, start, _ in taken]
    last_ns = max(start + dur for _, start, dur in taken)
    payload = msgpack.packb(kept)
    return encode(Events(frame.track_id, len(taken), first_ns, last_ns, payload, frame.flags), MAX_MAX_FRAME_BYTES)


def _whole(process: ProcessView, frame: Events, selection: Selection) -> bool:
    """Whether every event of the frame is selected, by its header alone (not decoded): the selection takes events
    by no more than their times, and the frame's (its first start to its last end) lie in its window. An incident's
    window of a busy process is mostly such frames: its save decoded every event of each to take them all."""
    if not selection.by_start_only:
        return False
    offset, selected = process.clock_offset_ns, selection.filter
    since, until = selected.since_ns, selected.until_ns
    return (since is None or frame.first_ts_ns + offset >= since) and (
        until is None or frame.last_ts_ns + offset < until
    )


#: What a snapshot file keeps of a segment: its session frames as stored, and its EVENTS frames' selected events.
_PARTS: Final[dict[type, _Part]] = {
    **dict.fromkeys((Hello, Schema, Strings, Stacks, Track, Stats), _as_stored),
    Events: _selected_part,
}
