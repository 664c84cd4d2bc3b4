"""The spans, instants and counters tables' columns straight from a stored frame's msgpack payload, in C
(``_tables.c``), when built: Arrow buffers (int64 and double values; UTF-8 strings as offsets and data; a validity
bitmap where a value may be null) that ``parquet.py`` wraps without a copy. No Python object per row: what makes a
table of millions of spans take seconds.

The C writer takes the spans (or plain instants) whose args are a map (or none), and the counters whose args are a map
of distinct text keys, most of what a store holds, with the GIL released; the rest of a frame (traced calls, markers,
incidents, async events, what cannot be shown) it leaves to the Python rows (``table_rows.py``), which define the
tables; tests hold the two to the same rows. ``FrameRows`` keeps, per segment (each read by a decoder of its own), the
tables the C writer reads: a code per kind id (``chrome_frames.kind_codes``) and each string's UTF-8. The messages and
samples tables are made in Python alone.

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

__all__ = ["ACCELERATED", "C_TABLES", "ColumnBuffers", "FrameRows"]

_tables = load_optional("ringtrace.collector.export._tables")
#: Whether the C writer is there.
ACCELERATED: Final = _tables is not None


class CTable(NamedTuple):
    """A table the C writer makes rows of: its number there, and the columns it fills, in the order of its buffers."""

    number: int
    ints: tuple[str, ...]
    strings: tuple[str, ...]
    #: A column of doubles (the counters' ``value``), if the table has one.
    floats: tuple[str, ...] = ()


#: The tables the C writer makes rows of (the spans' ``category`` is null in all its rows: no span it takes has one).
C_TABLES: Final = {
    "spans": CTable(
        0,
        ("pid", "start_ns", "duration_ns", "end_ns"),
        ("process", "host", "track", "name", "args", "trace_id", "span_id", "parent_span_id"),
    ),
    "instants": CTable(
        1, ("pid", "ts_ns"), ("process", "host", "track", "name", "args", "trace_id", "kind", "async_id")
    ),
    "counters": CTable(2, ("pid", "ts_ns"), ("process", "host", "track", "name", "series"), ("value",)),
}
#: Where a table's string columns start among the bits of ``wanted`` (after the most int columns a table has), and
#: where its column of doubles is (after the most string columns).
_STRING_BITS: Final = 4
_FLOAT_BIT: Final = 12

#: Bytes a builder holds before its rows are handed over, whatever their number (a row group's string data must stay
#: under 2 GiB: the C writer leaves a frame past that to the Python rows).
MAX_BATCH_BYTES: Final = 256 << 20


class ColumnBuffers(NamedTuple):
    """Rows of one of ``C_TABLES`` as Arrow buffers."""

    table: CTable
    rows: int
    #: Little-endian int64 values of each of the table's ``ints`` (empty: a column not filled).
    ints: tuple[bytes, ...]
    #: (validity bitmap or None if no null, int32 offsets, UTF-8 data) of each of the table's ``strings`` (as for one
    #: row of none: a column not filled).
    strings: tuple[tuple[bytes | None, bytes, bytes], ...]
    #: (validity bitmap or None if no null, little-endian doubles) of the table's ``floats`` column (None: it has
    #: none; no values: not filled).
    floats: tuple[bytes | None, bytes] | None


class FrameRows(SegmentTables):
    """The C writer's rows of one of ``C_TABLES`` of the frames of one snapshot, oldest segment first: ``add`` a
    frame's, ``take`` them.

    Args:
        table: one of ``C_TABLES``.
        since_ns, until_ns: the window rows must overlap (None: no bound), when a filter selects by times alone.
        columns: the columns to fill (None: all); the others are left empty (the C writer neither copies the rows'
            texts nor writes args as JSON text where none of args and the ids found there is read).
    """

    def __init__(
        self,
        table: str,
        since_ns: int | None = None,
        until_ns: int | None = None,
        *,
        columns: tuple[str, ...] | None = None,
    ) -> None:
        assert _tables is not None, "FrameRows needs the C writer (ACCELERATED)"
        super().__init__()
        self.table = C_TABLES[table]
        self._add = _tables.add_rows
        self._take = _tables.take_rows
        self._builder = _tables.builder(self.table.number)
        self._since_ns = since_ns
        self._until_ns = until_ns
        bits = [
            *enumerate(self.table.ints),
            *((_STRING_BITS + k, name) for k, name in enumerate(self.table.strings)),
            *((_FLOAT_BIT, name) for name in self.table.floats),
        ]
        self._wanted = sum(1 << bit for bit, name in bits if columns is None or name in columns)
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
        """Add the frame's rows the C writer takes: (deferred,), one byte per event, nonzero for each left to the
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
        rows, ints, strings, floats = self._take(self._builder)
        self.rows = self.size = 0
        return ColumnBuffers(self.table, rows, ints, strings, floats)

    def _encoded(self, text: str) -> bytes | None:
        try:
            return text.encode()
        except UnicodeEncodeError:  # (a lone surrogate: no UTF-8, no Arrow string) the Python rows decide
            return None
