"""The spans table's columns straight from a stored frame's msgpack payload, in C (``_tables.c``), when built: Arrow
buffers (int64 values; UTF-8 strings as offsets and data, a validity bitmap where a value may be null) that
``parquet.py`` wraps without a copy. No Python object per span: what makes a table of millions of spans take seconds.

The C writer takes the spans whose args are a map (or none), most of what a store holds, with the GIL released; the
rest of a frame (traced calls, markers, what cannot be shown) it leaves to the Python rows (``table_rows.py``), which
define the table; tests hold the two to the same rows. ``FrameSpans`` keeps, per segment (each read by a decoder of
its own), the tables the C writer reads: a code per kind id (``chrome_frames.kind_codes``) and each string's UTF-8.

Not built, or with ``RINGTRACE_PURE_PYTHON=1``: ``ACCELERATED`` is False and every row is made in Python.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from ringtrace.collector.export.chrome_frames import SegmentTables
from ringtrace.collector.read.frame_walk import ProcessView
from ringtrace.wire.frames import Events
from ringtrace.wire.model import TrackInfo
from ringtrace.wire.optional_c import load_optional
from ringtrace.wire.stream_tables import StreamTables

__all__ = ["ACCELERATED", "INT_COLUMNS", "STRING_COLUMNS", "ColumnBuffers", "FrameSpans"]

_tables = load_optional("ringtrace.collector.export._tables")
#: Whether the C writer is there.
ACCELERATED: Final = _tables is not None

#: The spans table's columns the C writer fills, in the order of its buffers (``category`` is null in all its rows:
#: no span it takes has one).
INT_COLUMNS: Final = ("pid", "start_ns", "duration_ns", "end_ns")
STRING_COLUMNS: Final = ("process", "host", "track", "name", "args", "trace_id", "span_id", "parent_span_id")

#: Bytes a builder holds before its rows are handed over, whatever their number (a row group's string data must stay
#: under 2 GiB: the C writer leaves a frame past that to the Python rows).
MAX_BATCH_BYTES: Final = 256 << 20


class ColumnBuffers(NamedTuple):
    """Rows of the spans table as Arrow buffers."""

    rows: int
    #: Little-endian int64 values of each of ``INT_COLUMNS`` (empty: a column not filled).
    ints: tuple[bytes, ...]
    #: (validity bitmap or None if no null, int32 offsets, UTF-8 data) of each of ``STRING_COLUMNS`` (as for one row
    #: of none: a column not filled).
    strings: tuple[tuple[bytes | None, bytes, bytes], ...]


class FrameSpans(SegmentTables):
    """The C writer's rows of the frames of one snapshot, oldest segment first: ``add`` a frame's, ``take`` them.

    Args:
        since_ns, until_ns: the window spans must overlap (None: no bound), when a filter selects by times alone.
        columns: the columns to fill (None: all); the others are left empty (the C writer neither copies the rows'
            texts nor writes args as JSON text where none of args and the ids found there is read).
    """

    def __init__(
        self, since_ns: int | None = None, until_ns: int | None = None, *, columns: tuple[str, ...] | None = None
    ) -> None:
        assert _tables is not None, "FrameSpans needs the C writer (ACCELERATED)"
        super().__init__()
        self._add = _tables.add_spans
        self._take = _tables.take_spans
        self._builder = _tables.spans_builder()
        self._since_ns = since_ns
        self._until_ns = until_ns
        filled = (*INT_COLUMNS, *STRING_COLUMNS)
        self._wanted = sum(1 << bit for bit, name in enumerate(filled) if columns is None or name in columns)
        #: Rows gathered, and the bytes they take.
        self.rows = 0
        self.size = 0

    def full(self) -> bool:
        """Whether the rows gathered make a row group."""
        from ringtrace.collector.export.table_rows import BATCH_ROWS  # (read when called: tests set it smaller)

        return self.rows >= BATCH_ROWS or self.size >= MAX_BATCH_BYTES

    def add(
        self, tables: StreamTables, frame: Events, process: ProcessView, track: TrackInfo
    ) -> tuple[bytes | None] | None:
        """Add the frame's spans the C writer takes: (deferred,), one byte per event, nonzero for each left to the
        Python rows (None: none is); None if the Python rows must make the whole frame's."""
        if not self._synced(tables):
            return None
        track_name = process.tracks.get(track.track_id, track).name  # the latest name, or an ended track's
        try:
            made = self._add(
                self._builder, frame.payload, frame.count, self._columns, frame.first_ts_ns, process.clock_offset_ns,
                self._since_ns, self._until_ns, self._codes, self._names, self._spans,
                process.name.encode(), process.trace_pid, process.host.encode(), track_name.encode(), self._wanted,
            )  # fmt: skip
        except (OverflowError, UnicodeEncodeError):  # times past 64 bits, a name Arrow cannot hold: the Python rows'
            return None
        if made is None:
            return None
        self.rows, self.size, deferred = made
        return (deferred,)

    def take(self) -> ColumnBuffers:
        """The rows gathered, and none left."""
        rows, ints, strings = self._take(self._builder)
        self.rows = self.size = 0
        return ColumnBuffers(rows, ints, strings)

    def _encoded(self, text: str) -> bytes | None:
        try:
            return text.encode()
        except UnicodeEncodeError:  # (a lone surrogate: no UTF-8, no Arrow string) the Python rows decide
            return None
