"""Perfetto packets of a stored frame's common events straight from its msgpack payload, in C (``_perfetto.c``), when
built.

The C writer takes a frame whose shown events are all spans, instants and counters with plain args (numbers, text,
booleans, nil, and lists and maps of them): most of what a store holds. Any other frame the Python writer
(``perfetto.py``) writes whole, as it defines what a trace holds. The C writer names things through the Python
writer's own tables (it is handed the functions that intern a name or describe a counter's track, and calls each at
the first use in a frame, in event order), so a trace is the same bytes whichever writer wrote each frame; tests hold
the two to that.

Not built (no C compiler at install time), or with ``RINGTRACE_PURE_PYTHON=1``: ``ACCELERATED`` is False and the
Python writer writes every frame, many times slower.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, NamedTuple

from ringtrace.collector.export.chrome_frames import column_order, kind_codes
from ringtrace.wire.frames import Events
from ringtrace.wire.optional_c import load_optional
from ringtrace.wire.stream_tables import StreamTables

__all__ = ["ACCELERATED", "FastPackets", "FramePackets", "Naming"]

_perfetto = load_optional("ringtrace.collector.export._perfetto")
#: Whether the C writer is there.
ACCELERATED: Final = _perfetto is not None


class Naming(NamedTuple):
    """The Python writer's functions the C writer calls, each at most once per frame for the same argument."""

    #: Once, before the first event shown: (the TrackEvent field of the frame's track, the sequence's tail).
    enter: Callable[[], tuple[bytes, bytes]]
    #: An event's name, by string id: the TrackEvent field naming it.
    name: Callable[[int], bytes]
    #: An argument's key: the DebugAnnotation field naming it.
    annotation: Callable[[str], bytes]
    #: A counter's name (string id) and the key of one of its values: the TrackEvent field of that counter's track.
    counter: Callable[[int, str], bytes]


class FastPackets(NamedTuple):
    """What the C writer made of a frame."""

    #: Events shown.
    shown: int
    #: Events that cannot be shown (a kind never declared, a shape no snapshot shows, times no clock gives).
    skipped: int
    #: The first TrackEvent in the chunk's order and its timestamp (None: no event made a packet), for the writer to
    #: make a packet of with the chunk's first tail.
    first_ts_ns: int
    first_event: bytes | None
    #: The packets of the others, whole, in order.
    rest: bytes


class FramePackets:
    """The C writer over the frames of one trace, segment by segment.

    Args:
        since_ns, until_ns: the window events must overlap (None: no bound), when a filter selects by times alone.
    """

    def __init__(self, since_ns: int | None = None, until_ns: int | None = None) -> None:
        assert _perfetto is not None, "FramePackets needs the C writer (ACCELERATED)"
        self._frame_packets = _perfetto.frame_packets
        self._since_ns = since_ns
        self._until_ns = until_ns
        self._tables: StreamTables | None = None
        self._kinds_seen = -1
        self._codes: bytes | None = None
        self._columns: tuple[int, ...] | None = None

    def packets(self, tables: StreamTables, frame: Events, offset_ns: int, naming: Naming) -> FastPackets | None:
        """The frame's packets; None if the Python writer must write the frame (an event the C writer does not
        take, a payload it does not read, kind ids too large to index)."""
        if tables is not self._tables or len(tables.kinds) != self._kinds_seen:
            self._tables = tables
            self._kinds_seen = len(tables.kinds)
            self._codes = kind_codes(tables)
            self._columns = column_order(tables)
        if self._codes is None or self._columns is None:
            return None
        try:
            made = self._frame_packets(
                frame.payload, frame.count, self._columns, frame.first_ts_ns, offset_ns, self._since_ns,
                self._until_ns, self._codes, *naming,
            )  # fmt: skip
        except OverflowError:  # times past 64 bits: the Python walk counts them
            return None
        return None if made is None else FastPackets(*made)
