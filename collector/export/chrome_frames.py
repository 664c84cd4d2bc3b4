"""Chrome JSON of a stored frame's common events straight from its msgpack payload, in C (``_chrome.c``), when built.

The C writer takes the spans, instants and counters whose args are a map (or none): most of what a store holds. It
runs with the GIL released, so a snapshot neither holds up the event loop nor waits on it. Everything else in a frame
it leaves to the Python event walk (``read/event_walk.py``), which defines what a snapshot shows; tests hold the two
to the same JSON. ``FrameJson`` keeps, per segment (each is read by a decoder of its own), the tables the C writer
reads: a code per kind id and each string as an escaped JSON string, grown as the segment declares more.

Not built (no C compiler at install time), or with ``RINGTRACE_PURE_PYTHON=1``: ``ACCELERATED`` is False and every
event goes through the Python walk, at a fraction of the speed.
"""

from __future__ import annotations

from array import array
from itertools import islice
from typing import Final, NamedTuple

import orjson
from ringtrace.collector.read.frame_walk import PHASES, SHOWN_SHAPES, is_incident
from ringtrace.wire.call_records import is_call
from ringtrace.wire.frame_types import EVENT_COLUMNS
from ringtrace.wire.frames import Events
from ringtrace.wire.optional_c import load_optional
from ringtrace.wire.stream_tables import StreamTables

__all__ = ["ACCELERATED", "FastFrame", "FrameJson", "SegmentTables", "column_order", "kind_codes"]


_chrome = load_optional("ringtrace.collector.export._chrome")
#: Whether the C writer is there.
ACCELERATED: Final = _chrome is not None

#: Kind codes the C writers read (``_chrome.c``, ``_perfetto.c``): not shown (counted undecodable), the Python
#: walk's, or a phase.
_NOT_SHOWN: Final = 0
_PYTHON: Final = 1
_FAST_PHASES: Final = {shape: ord(PHASES[shape]) for shape in ("span", "instant", "counter")}
#: Past these ids a frame goes through the Python walk (tables indexed by id would be too large).
_MAX_KIND_ID: Final = 1 << 16
_MAX_STRING_ID: Final = 1 << 22


class FastFrame(NamedTuple):
    """What the C writer made of a frame."""

    #: The JSON objects of its events shown, joined by commas (b"" if none).
    json: bytes
    #: One byte per event, nonzero for each left to the Python walk; None if none is.
    deferred: bytes | None
    shown: int
    #: Events that cannot be shown (a kind never declared, a shape no snapshot shows, times no clock gives).
    skipped: int
    #: Events shown before the collector's origin (a negative ``ts``).
    before_origin: int


class SegmentTables:
    """What a C writer reads of a stream's tables, kept in step with them as they grow: each kind's code and column
    order (``kind_codes``, ``column_order``), and each string's bytes as the writer copies them (``_encoded``) at
    the offsets ``_spans`` gives by id."""

    def __init__(self) -> None:
        self._tables: StreamTables | None = None
        self._kinds_seen = -1
        self._codes = b""
        self._strings_seen = 0
        self._names = bytearray()
        self._spans = array("q")
        self._columns: tuple[int, ...] | None = None
        self._unindexed = False

    def _synced(self, tables: StreamTables) -> bool:
        """Bring what the writer reads up to ``tables``; False if the Python walk must read the frame (tables it
        cannot index)."""
        if tables is not self._tables:
            self._start(tables)
        if len(tables.kinds) != self._kinds_seen:
            self._sync_kinds(tables)
        if len(tables.strings) != self._strings_seen:
            self._sync_strings(tables)
        return self._columns is not None and not self._unindexed

    def _encoded(self, text: str) -> bytes | None:
        """A string as the writer copies it (None: it cannot, and leaves the events that name it to Python)."""
        raise NotImplementedError

    def _start(self, tables: StreamTables) -> None:
        """A new segment, with tables of its own."""
        self._tables = tables
        self._kinds_seen = -1
        self._strings_seen = 0
        self._names = bytearray()
        self._spans = array("q")
        self._unindexed = False

    def _sync_kinds(self, tables: StreamTables) -> None:
        self._kinds_seen = len(tables.kinds)
        self._columns = column_order(tables)
        codes = kind_codes(tables)
        if codes is None:
            self._unindexed = True
            return
        self._codes = codes

    def _sync_strings(self, tables: StreamTables) -> None:
        """The strings declared since the last frame (tables only grow: a reset gives the stream new ones)."""
        strings = tables.strings
        names, spans = self._names, self._spans
        for string_id, text in islice(strings.items(), self._strings_seen, None):
            if not 0 <= string_id < _MAX_STRING_ID:
                self._unindexed = True
                return
            if string_id * 2 >= len(spans):
                spans.extend([-1] * (string_id * 2 + 2 - len(spans)))
            encoded = self._encoded(text)
            if encoded is None:
                continue
            start = len(names)
            names += encoded
            spans[string_id * 2] = start
            spans[string_id * 2 + 1] = len(names)
        self._strings_seen = len(strings)


class FrameJson(SegmentTables):
    """The C writer over the frames of one snapshot, oldest segment first.

    Args:
        origin_ns: the wall-clock ns that ``ts`` 0 stands for.
        since_ns, until_ns: the window events must overlap (None: no bound), when a filter selects by times alone.
    """

    def __init__(self, origin_ns: int, since_ns: int | None = None, until_ns: int | None = None) -> None:
        assert _chrome is not None, "FrameJson needs the C writer (ACCELERATED)"
        super().__init__()
        self._events_json = _chrome.events_json
        self._origin_ns = origin_ns
        self._since_ns = since_ns
        self._until_ns = until_ns

    def events(self, tables: StreamTables, frame: Events, offset_ns: int, pid: int, tid: int) -> FastFrame | None:
        """The frame's common events as JSON; None if the Python walk must read the whole frame (a payload the
        C writer does not take, or tables too large to index)."""
        if not self._synced(tables):
            return None
        ids = b',"pid":%d,"tid":%d' % (pid, tid)
        counter_ids = ids + b',"id":"%d"' % tid  # (as export/chrome.py names a counter's track)
        try:
            made = self._events_json(
                frame.payload, frame.count, self._columns, frame.first_ts_ns, offset_ns, self._origin_ns,
                self._since_ns, self._until_ns, self._codes, self._names, self._spans, ids, counter_ids,
            )  # fmt: skip
        except OverflowError:  # times past 64 bits: the Python walk counts them
            return None
        return None if made is None else FastFrame(*made)

    def _encoded(self, text: str) -> bytes:
        return orjson.dumps(text)  # (escaped, quoted: as the JSON writer copies it)


def column_order(tables: StreamTables) -> tuple[int, ...] | None:
    """Where kind, name, ts, dur and args are among a segment's columns; None if it declares others."""
    columns = tables.columns
    if sorted(columns) != sorted(EVENT_COLUMNS):
        return None
    return tuple(columns.index(name) for name in EVENT_COLUMNS)


def kind_codes(tables: StreamTables) -> bytes | None:
    """The C writers' code of each kind id of a segment (a byte each); None if its ids are too large to index."""
    kinds = tables.kinds
    if kinds and not 0 <= min(kinds) <= max(kinds) < _MAX_KIND_ID:
        return None
    codes = bytearray(max(kinds, default=-1) + 1)
    for kind_id, kind in kinds.items():
        shape = kind.shape
        if is_call(kind) or is_incident(kind):  # the Python walk resolves a call's stack id to a file and line, and
            codes[kind_id] = _PYTHON  # shows an incident with its category and its reason among its args
            continue
        codes[kind_id] = _FAST_PHASES.get(shape, _PYTHON) if shape in SHOWN_SHAPES else _NOT_SHOWN
    return bytes(codes)
