"""Where a rules' watch is in what is stored (``watch.py``): a cursor per segment, what a reload keeps, and which
segments a step reads (``to_read``: only those are pinned for it).

A step reads the segments that gained bytes since, oldest first, until it has read ``max_step_bytes``: which ones is
known before the step, from the cursors alone, so that the step's snapshot pins those and leaves the rest to the ring
(a step that pinned every stored segment made what the ring overwrote meanwhile take fresh buffers).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ringtrace.collector.incidents.criteria import SegmentCriteria
from ringtrace.collector.incidents.judge import Judge
from ringtrace.collector.read.frame_walk import ProcessView
from ringtrace.collector.store.views import SegmentView
from ringtrace.wire.decoder import SessionDecoder

__all__ = ["Cursor", "Progress", "advance", "feed", "let_go", "to_read"]


@dataclass(slots=True)
class Cursor:
    owner: int
    #: Bytes of the segment read so far (or there when the watch began).
    offset: int
    #: The decoder that read them; None until the segment grows (a segment that was there when the watch began).
    decoder: SessionDecoder | None
    #: The events the segment held when last seen.
    seen_events: int
    #: Events the segment held when the watch began (none, for a newer one): they are not the watch's.
    counted_from: int
    #: Index entries (EVENTS frames) wholly before ``offset``, and their events.
    read_entries: int = 0
    read_events: int = 0
    criteria: SegmentCriteria | None = None
    #: A frame could not be decoded: the rest of the segment is counted, not read.
    broken: bool = False
    #: The bytes before the segment's first EVENTS frame (its tables replayed), while they are all the decoder read.
    prefix: bytes | None = None


@dataclass(slots=True)
class Progress:
    """Where a watch is, what a reload keeps."""

    cursors: dict[int, Cursor] = field(default_factory=dict)
    judge: Judge = field(default_factory=Judge)
    began: bool = False
    #: Segments newer than this are read from their start.
    newest_seq: int = -1
    #: Per process: events the store had kept of it when the watch began (``kept``), events of segments gone since
    #: that the watch had read, and of those it had not read (a lower bound: what it saw of them).
    baseline: dict[int, int] = field(default_factory=dict)
    departed_read: dict[int, int] = field(default_factory=dict)
    departed_unread: dict[int, int] = field(default_factory=dict)
    #: Per process: events the store kept since the watch began that it neither read nor can still read.
    missed: dict[int, int] = field(default_factory=dict)
    undecodable_events: int = 0
    unseen_segments: int = 0
    #: Per process: the criteria of the latest segment compiled, which its next segment copies if its tables are
    #: the same (``SegmentCriteria.following``).
    latest_criteria: dict[int, SegmentCriteria] = field(default_factory=dict)
    #: Per process: the cursor of its latest segment read from its start, whose decoder the next may take over.
    prefixed: dict[int, Cursor] = field(default_factory=dict)


def to_read(progress: Progress, plan_empty: bool, max_step_bytes: int, segments: Iterable[tuple[int, int]]) -> set[int]:
    """Of the segments a step is to be given, ``(seq, used)`` each, oldest first, those it reads bytes of: as
    ``RuleWatch.step`` spends its ``max_step_bytes`` (with no rule to judge, it reads only their index)."""
    if not progress.began:
        return set()
    budget, chosen = max_step_bytes, set()
    for seq, used in segments:
        cursor = progress.cursors.get(seq)
        offset = 0 if cursor is None else cursor.offset
        if offset >= used or (cursor is not None and cursor.broken):
            continue
        if not plan_empty:
            if budget <= 0:
                break
            budget -= min(used, offset + budget) - offset
        chosen.add(seq)
    return chosen


def let_go(
    segments: list[tuple[ProcessView, SegmentView]], cursors: dict[int, Cursor], latest: dict[int, SegmentCriteria]
) -> None:
    """Drop the decoder and criteria of each segment read whole that a newer one of its process follows (it is
    sealed: it will not grow), so that a long watch of a large store keeps one set of tables per process, not one
    per segment (and the latest criteria of processes that have none stored)."""
    newest: dict[int, int] = {}
    for _, segment in segments:
        newest[segment.owner] = max(newest.get(segment.owner, -1), segment.seq)
    for owner in latest.keys() - newest.keys():  # (a process with nothing stored any more)
        del latest[owner]
    for _, segment in segments:
        cursor = cursors.get(segment.seq)
        sealed = segment.seq != newest[segment.owner]  # (a segment that grows after all is caught up on again)
        if cursor is not None and cursor.decoder is not None and sealed and cursor.offset >= segment.used:
            cursor.decoder = cursor.criteria = None


def feed(cursor: Cursor, data: memoryview) -> None:
    """Session frames (or part of one) to the cursor's decoder, applied to its tables: it read more than the
    segment's first bytes (``prefix``)."""
    decoder = cursor.decoder
    if data and decoder is not None:  # (no data at all would say the stream ended)
        cursor.prefix = None
        decoder.receive_data(data)
        for _ in decoder:
            pass


def advance(cursor: Cursor, segment: SegmentView) -> None:
    """Count the index entries (EVENTS frames) now wholly before the cursor."""
    counted = segment.frames_before(cursor.offset, cursor.read_entries, cursor.read_events)
    cursor.read_entries, cursor.read_events = counted
