"""Packs a thread's recorded events into EVENTS frames, on the flusher thread.

The fast path is column-wise and runs in C: strided slices (``fields[2::5]``) split a thread's flat buffer into
columns, ``map`` over the string table turns labels into ids, ``map(operator.sub, ...)`` turns timestamps into
offsets and durations, and msgpack packs the columns. Anything user-supplied that this path cannot take (an
unhashable label, an argument msgpack refuses) sends that batch down a slow path that cleans it event by event: a bad
event costs time, never the batch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import repeat
from operator import add, sub
from typing import Any, NamedTuple

import msgpack

from .errors import FrameTooLarge
from .model import RECORD_FIELDS, StringTable, safe_str
from .protocol import (
    DEFAULT_MAX_FRAME_BYTES,
    EVENTS_HEADER,
    FRAME_HEADER,
    MIN_MAX_FRAME_BYTES,
    Events,
    Strings,
    encode,
)

__all__ = ["BatchEncoder", "EncodedBatch"]

#: Bytes one STRINGS frame may spend on strings: half the smallest max_frame_bytes a collector accepts.
_STRINGS_FRAME_BUDGET = MIN_MAX_FRAME_BYTES // 2


def _to_msgpack(value: object) -> object:
    """msgpack's fallback for types it does not know: sets become lists, anything else its text."""
    if isinstance(value, set | frozenset):
        return list(value)
    return safe_str(value)


class _Columns(NamedTuple):
    """A run of events, column by column: the EVENTS payload before timestamps become offsets."""

    kinds: Sequence[int]
    names: Sequence[int]
    starts: Sequence[int]
    ends: Sequence[int]
    args: Sequence[Any]


class EncodedBatch:
    """The frames for one drained batch: STRINGS frames first (ids the events use), then EVENTS frames."""

    __slots__ = ("dropped_events", "events", "strings")

    def __init__(self) -> None:
        self.strings: list[bytes] = []
        #: ``(frame bytes, event count)`` pairs.
        self.events: list[tuple[bytes, int]] = []
        #: Events that could not be sent at all (one event larger than a frame).
        self.dropped_events = 0


class BatchEncoder:
    """Turns drained events (flat: ``kind, label, start_ns, end_ns, args`` per event) into wire frames.

    Args:
        strings: the process's string table; new labels are added to it.
        max_frame_bytes: frames are split so that none exceeds this.
        max_events_per_frame: a frame holds at most this many events.
    """

    def __init__(
        self,
        strings: StringTable,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_events_per_frame: int = 8192,
    ) -> None:
        self.strings = strings
        self.max_frame_bytes = max_frame_bytes
        self.max_events_per_frame = max_events_per_frame
        self._packer = msgpack.Packer(default=_to_msgpack)

    def encode(self, source_id: int, fields: list[Any]) -> EncodedBatch:
        """Frames for one thread's drained events, ``RECORD_FIELDS`` values each."""
        batch = EncodedBatch()
        step = self.max_events_per_frame * RECORD_FIELDS
        for start in range(0, len(fields), step):
            self._encode_chunk(batch, source_id, fields[start : start + step])
        first_id, new_strings = self.strings.take_new()
        batch.strings = self.strings_frames(first_id, new_strings)
        return batch

    def strings_frames(self, first_id: int, strings: Sequence[str]) -> list[bytes]:
        """STRINGS frames for ``strings`` (ids from ``first_id``), split to stay small."""
        frames = []
        start = 0
        while start < len(strings):
            end, spent = start, 0
            while end < len(strings) and (end == start or spent + len(strings[end]) * 4 < _STRINGS_FRAME_BUDGET):
                spent += len(strings[end]) * 4  # worst case of UTF-8
                end += 1
            frames.append(encode(Strings(first_id + start, tuple(strings[start:end])), self.max_frame_bytes))
            start = end
        return frames

    def resplit(self, frame: bytes) -> EncodedBatch:
        """An EVENTS frame packed under a larger limit, split again to fit ``max_frame_bytes``."""
        source_id, _, first_ns, _ = EVENTS_HEADER.unpack_from(frame, FRAME_HEADER.size)
        kinds, names, offsets, durations, args = msgpack.unpackb(
            memoryview(frame)[FRAME_HEADER.size + EVENTS_HEADER.size :], raw=False, strict_map_key=False
        )
        starts = [first_ns + offset for offset in offsets]
        batch = EncodedBatch()
        self._encode_columns(batch, source_id, _Columns(kinds, names, starts, list(map(add, starts, durations)), args))
        return batch

    def _encode_chunk(self, batch: EncodedBatch, source_id: int, fields: list[Any]) -> None:
        kinds, labels, starts, ends, args = (fields[column::RECORD_FIELDS] for column in range(RECORD_FIELDS))
        overflowed = self.strings.overflowed
        try:
            names = list(map(self.strings.__getitem__, labels))
        except Exception:  # an unhashable label: look all up again, counting overflow once
            self.strings.overflowed = overflowed
            names = [self.strings[label if _hashable(label) else safe_str(label)] for label in labels]
        self._encode_columns(batch, source_id, _Columns(kinds, names, starts, ends, args))

    def _encode_columns(self, batch: EncodedBatch, source_id: int, columns: _Columns) -> None:
        count = len(columns.kinds)
        try:
            frame = self._pack(source_id, columns)
        except FrameTooLarge:
            if count == 1:
                batch.dropped_events += 1
                return
            half = math.ceil(count / 2)
            for part in (slice(None, half), slice(half, None)):
                self._encode_columns(batch, source_id, _Columns(*(column[part] for column in columns)))
            return
        batch.events.append((frame, count))

    def _pack(self, source_id: int, columns: _Columns) -> bytes:
        kinds, names, starts, ends, args = columns
        first_ns = min(starts)
        packed = [kinds, names, list(map(sub, starts, repeat(first_ns))), list(map(sub, ends, starts)), args]
        try:
            payload = self._packer.pack(packed)
        except Exception:  # an argument msgpack refuses even with the fallback (an int beyond 64 bits, say)
            packed[4] = [self._packable_args(a) for a in args]
            payload = self._packer.pack(packed)
        # Events are recorded when they end, so the last one ends last.
        return encode(Events(source_id, len(kinds), first_ns, ends[-1], payload), self.max_frame_bytes)

    def _packable_args(self, args: Any) -> Any:
        """``args`` with each value msgpack refuses replaced by its text."""
        if self._packable(args):
            return args
        return {safe_str(k): v if self._packable(v) else safe_str(v) for k, v in args.items()}

    def _packable(self, value: object) -> bool:
        try:
            self._packer.pack(value)
        except Exception:
            return False
        return True


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True
