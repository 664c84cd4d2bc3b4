"""A stored EVENTS frame's columns read for the span walk (``span_walk.py``): kinds, names, start offsets and
durations first, the args column only if asked for. Most frames of a search for slow spans need no args at all, and
unpacking the args (a map per event) is most of what decoding a frame costs.

Only payloads laid out as ``EVENT_COLUMNS`` (args last), each column of the header's count, are read here: anything
else is left to the event walk, which decodes it whole or counts it as undecodable.
Pure and synchronous.
"""

from __future__ import annotations

from typing import Any, Final

import msgpack
from ringtrace.wire.arg_values import clip_nesting
from ringtrace.wire.frame_types import EVENT_COLUMNS
from ringtrace.wire.frames import Events
from ringtrace.wire.stream_tables import StreamTables

__all__ = ["FrameColumns", "read_columns"]

_LEADING: Final = len(EVENT_COLUMNS) - 1


class FrameColumns:
    """The leading columns of one frame (``kinds``, ``names``, ``offsets``, ``durations``), and its args on demand."""

    __slots__ = ("_args", "_unpacker", "count", "durations", "kinds", "names", "offsets")

    def __init__(self, unpacker: msgpack.Unpacker, count: int, leading: list[list[Any]]) -> None:
        self._unpacker = unpacker
        self._args: list[Any] | None = None
        self.count = count
        self.kinds, self.names, self.offsets, self.durations = leading

    def args(self, indices: list[int]) -> list[Any] | None:
        """The args of the events at ``indices``, nesting clipped as every reader clips it (``clip_nesting``); None
        if the args column is malformed."""
        if self._args is None:
            try:
                column = self._unpacker.unpack()
            except Exception:
                return None
            if type(column) is not list or len(column) != self.count:
                return None
            self._args = column
        taken = [self._args[index] for index in indices]  # (only these are clipped: a pass over them all costs)
        clip_nesting(taken)
        return taken


def read_columns(tables: StreamTables, frame: Events) -> FrameColumns | None:
    """The frame's leading columns; None if its segment declares other columns, or its payload is not arrays of the
    header's count (the event walk then reads it whole, and counts what it cannot)."""
    if tables.columns != EVENT_COLUMNS:
        return None
    payload = frame.payload
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=max(len(payload), 1))
    try:
        unpacker.feed(payload)
        if unpacker.read_array_header() != len(EVENT_COLUMNS):
            return None
        leading = [unpacker.unpack() for _ in range(_LEADING)]
    except Exception:
        return None
    count = frame.count
    if any(type(column) is not list or len(column) != count for column in leading):
        return None
    return FrameColumns(unpacker, count, leading)
