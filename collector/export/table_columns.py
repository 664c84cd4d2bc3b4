"""The spans, instants, counters, messages and samples tables' columns straight from a stored frame's msgpack payload,
in C (``_tables.c``), when built: Arrow buffers (int64 and double values; UTF-8 strings as offsets and data; a
validity bitmap where a value may be null) that ``parquet.py`` wraps without a copy. No Python object per row: what
makes a table of millions of spans take seconds.

The C writer takes the spans (or plain instants) whose args are a map (or none), the counters whose args are a map of
distinct text keys, the messages of a kind it has a template of (``message_template``: the kind's text cut at its
placeholders, its fields' names), and the samples (each stack resolved through the segment's stack table), most of what
a store holds, with the GIL released; the rest of a frame (traced calls, markers, incidents, async events, what cannot
be shown) it leaves to the Python rows (``table_rows.py``), which define the tables; tests hold the two to the same
rows. ``FrameRows`` keeps, per segment (each read by a decoder of its own), the tables the C writer reads: a code per
kind id (``chrome_frames.kind_codes``), each string's UTF-8, and each message kind's template (by which the other tables
also leave such messages out in C: a frame of spans and messages is read without the Python walk), and for the samples
table the stack table's nodes and frames.

Not built, or with ``RINGTRACE_PURE_PYTHON=1``: ``ACCELERATED`` is False and every row is made in Python.
"""

from __future__ import annotations

import re
import struct
from array import array
from typing import Final, NamedTuple

from ringtrace.collector.export.chrome_frames import SegmentTables
from ringtrace.collector.read.frame_walk import ProcessView
from ringtrace.collector.read.pool import let_go
from ringtrace.wire.frames import Events
from ringtrace.wire.message_format import PLACEHOLDER
from ringtrace.wire.model import TrackInfo
from ringtrace.wire.optional_c import load_optional
from ringtrace.wire.stack_tree import StackTree
from ringtrace.wire.stream_tables import StreamTables
from ringtrace.wire.table_frames import KindSpec

__all__ = ["ACCELERATED", "C_TABLES", "NOT_MESSAGES", "ColumnBuffers", "FrameRows", "message_template"]

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
    #: A column of stacks (the samples' ``stack``: lists of (function, file, line)), if the table has one.
    stacks: tuple[str, ...] = ()


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
    "messages": CTable(
        3, ("pid", "ts_ns"), ("process", "host", "track", "text", "args", "trace_id", "category", "priority")
    ),
    "samples": CTable(4, ("pid", "ts_ns"), ("process", "host", "track", "task", "leaf"), stacks=("stack",)),
}
#: Where a table's string columns start among the bits of ``wanted`` (after the most int columns a table has), and
#: where its column of doubles (or of stacks) is (after the most string columns).
_STRING_BITS: Final = 4
_FLOAT_BIT: Final = 12

#: Bytes a builder holds before its rows are handed over, whatever their number (a row group's string data must stay
#: under 2 GiB: the C writer leaves a frame past that to the Python rows).
MAX_BATCH_BYTES: Final = 256 << 20

#: The walk's categories that are no message's (a message's category is its kind's name): a message kind of one of
#: these names makes no row of the messages table.
NOT_MESSAGES: Final = frozenset({"", "incident", "async", "call", "sample"})
#: Values the C writer takes of one message at most (_tables.c's MAX_VALUES): a kind of more fields has no template.
_MAX_VALUES: Final = 64
#: The names a message's values past its fields take (``render``): a kind with a field of such a name has no template
#: (one of its values could take the same name as another).
_VALUE_NAME: Final = re.compile(r"value([1-9][0-9]*)")
_NO_INDEX: Final = 0xFFFFFFFF
#: ``chrome_frames.kind_codes``' code of a kind the Python walk shows, and the samples table's writer's code of a
#: sample (``_tables.c``).
_WALKED: Final = 1
_SAMPLE_CODE: Final = ord("P")


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
    #: The table's ``stacks`` column (None: it has none): int32 offsets of each row's first frame (and one past the
    #: last), then the frames' function and file ((int32 offsets, UTF-8 data) each) and line (little-endian int64).
    stacks: tuple[bytes, tuple[bytes, bytes], tuple[bytes, bytes], bytes] | None = None


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
        self._templates = b""
        self._template_spans = array("q")
        self._samples = table == "samples"
        #: What the samples table's writer reads of the segment's stack table (``_sync_stacks``).
        self._stack_tree: StackTree | None = None
        self._stack_parents = array("q")
        self._stack_leaves = array("q")
        self._frame_texts = bytearray()
        self._frame_spans = array("q")
        self._since_ns = since_ns
        self._until_ns = until_ns
        bits = [
            *enumerate(self.table.ints),
            *((_STRING_BITS + k, name) for k, name in enumerate(self.table.strings)),
            *((_FLOAT_BIT, name) for name in (*self.table.floats, *self.table.stacks)),
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
        stacks: tuple[object, ...] = ()
        if self._samples:
            self._sync_stacks(tables.stacks)
            stacks = (self._stack_parents, self._stack_leaves, self._frame_texts, self._frame_spans)
        track_name = process.tracks.get(track.track_id, track).name  # the latest name, or an ended track's
        try:
            made = self._add(
                self._builder, frame.payload, frame.count, self._columns, frame.first_ts_ns, process.clock_offset_ns,
                self._since_ns, self._until_ns, self._codes, self._names, self._spans,
                process.name.encode(), process.trace_pid, process.host.encode(), track_name.encode(), self._wanted,
                self._templates, self._template_spans, *stacks,
            )  # fmt: skip
        except (OverflowError, UnicodeEncodeError):  # times past 64 bits, a name Arrow cannot hold: the Python rows'
            return None
        let_go()  # (the C writer ran without the GIL: the event loop could take it meanwhile)
        if made is None:
            return None
        self.rows, self.size, deferred = made
        return (deferred,)

    def take(self) -> ColumnBuffers:
        """The rows gathered, and none left."""
        rows, ints, strings, values = self._take(self._builder)
        self.rows = self.size = 0
        if self.table.stacks:
            return ColumnBuffers(self.table, rows, ints, strings, None, values)
        return ColumnBuffers(self.table, rows, ints, strings, values)

    def _encoded(self, text: str) -> bytes | None:
        try:
            return text.encode()
        except UnicodeEncodeError:  # (a lone surrogate: no UTF-8, no Arrow string) the Python rows decide
            return None

    def _sync_kinds(self, tables: StreamTables) -> None:
        super()._sync_kinds(tables)
        # (every table's: a message of a kind with a template is no row of the others, which leave it out in C)
        self._templates, self._template_spans = _templates(tables)
        if self._samples and not self._unindexed:  # (the samples table's writer alone takes the sampler's kind)
            codes = bytearray(self._codes)
            for kind_id, kind in tables.kinds.items():
                if kind.shape == "sample" and codes[kind_id] == _WALKED:
                    codes[kind_id] = _SAMPLE_CODE
            self._codes = bytes(codes)

    def _sync_stacks(self, tree: StackTree) -> None:
        """Bring what the writer reads of the segment's stack table up to ``tree`` (tables only grow; a new one
        starts again). A frame whose texts are no UTF-8 or whose line is past int64 is left to the Python rows."""
        if tree is not self._stack_tree:
            self._stack_tree = tree
            self._stack_parents, self._stack_leaves = array("q"), array("q")
            self._frame_texts, self._frame_spans = bytearray(), array("q")
        self._stack_parents.extend(tree.parents[len(self._stack_parents) :])
        self._stack_leaves.extend(tree.leaves[len(self._stack_leaves) :])
        texts, spans = self._frame_texts, self._frame_spans
        for function, file, line in tree.frames[len(spans) // 5 :]:
            try:
                function_bytes, file_bytes = function.encode(), file.encode()
            except UnicodeEncodeError:
                spans.extend((-1, -1, -1, -1, 0))
                continue
            if not -(2**63) <= line < 2**63:
                spans.extend((-1, -1, -1, -1, 0))
                continue
            start = len(texts)
            texts += function_bytes
            middle = len(texts)
            texts += file_bytes
            spans.extend((start, middle, middle, len(texts), line))


def _templates(tables: StreamTables) -> tuple[bytes, array[int]]:
    """A segment's message kinds' templates end to end, and (start, end) in them per kind id ((-1, -1): none)."""
    blob = bytearray()
    spans = array("q")
    kinds = tables.kinds
    if kinds and not 0 <= min(kinds) <= max(kinds) < 1 << 16:  # (``kind_codes`` leaves such a segment to Python)
        return b"", spans
    spans.extend([-1] * (2 * (max(kinds, default=-1) + 1)))
    for kind_id, kind in kinds.items():
        made = message_template(kind)
        if made is not None:
            spans[2 * kind_id] = len(blob)
            blob += made
            spans[2 * kind_id + 1] = len(blob)
    return bytes(blob), spans


def message_template(kind: KindSpec) -> bytes | None:
    """What the C writer renders a message of ``kind`` by (``_tables.c``'s ``Template``): its category, priority,
    which value is its ``trace_id``, its fields' names and its text cut at its placeholders (``render``'s, each with
    the value it shows, by index, or, for a value the message lacks, the placeholder as written); None for a kind
    whose messages are the Python rows' (not a message, a category that makes no row, names a value could share,
    text that is no UTF-8)."""
    names = [name for name, _ in kind.fields]
    if (
        kind.shape != "message"
        or kind.name in NOT_MESSAGES
        or len(names) > _MAX_VALUES
        or len(set(names)) != len(names)
        or any(_VALUE_NAME.fullmatch(name) for name in names)
    ):
        return None
    try:
        parts = []
        written = 0
        for match in PLACEHOLDER.finditer(kind.text):
            parts.append(struct.pack("<I", 0) + _text(kind.text[written : match.start()]))
            written = match.end()
            plain, name = match[1], match[2]
            index = _value_index(plain if plain is not None else name, names)
            if index is None:  # never a value: stays as written
                parts.append(struct.pack("<I", 0) + _text(match[0]))
            else:
                parts.append(struct.pack("<II", 1 if plain is not None else 2, index) + _text(match[0]))
        parts.append(struct.pack("<I", 0) + _text(kind.text[written:]))
        trace_index = names.index("trace_id") if "trace_id" in names else _NO_INDEX
        return b"".join(
            [
                _text(kind.name),
                _text(kind.priority),
                struct.pack("<II", trace_index, len(names)),
                *map(_text, names),
                struct.pack("<I", len(parts)),
                *parts,
            ]
        )
    except UnicodeEncodeError:  # (a lone surrogate: no UTF-8, no Arrow string) the Python rows decide
        return None


def _text(text: str) -> bytes:
    encoded = text.encode()
    return struct.pack("<I", len(encoded)) + encoded


def _value_index(name: str, fields: list[str]) -> int | None:
    """Which of a message's values ``name`` names: one of its fields, or one past them (``value5``...); None: none
    ever is."""
    if name in fields:
        return fields.index(name)
    past = _VALUE_NAME.fullmatch(name)
    if past is not None and len(fields) < int(past[1]) <= _MAX_VALUES:
        return int(past[1]) - 1
    return None
