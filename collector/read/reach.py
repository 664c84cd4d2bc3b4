"""How far a segment's events reach beyond their start times: what lets a window select frames by overlap while the
index knows only each frame's first and last time as its writer stated them (ringtrace's client states its last end,
another writer may state its last start: neither is checked, ingest never decodes a payload).

A frame's ``Reach`` is (back, ahead): ``ahead`` the longest any of its events lasts from its start (a span's
``dur``, a pair's start to its end), ``back`` the longest before an end of it that its pair started. A frame whose
events start from ``first`` to ``last`` then holds nothing that overlaps ``[since, until)`` unless
``first - back < until`` and ``last + ahead >= since`` (``EventFilter.overlaps``). Pairs are matched within the segment
as a snapshot pairs them (markers by track and name, source activity by track, async slices by id), and a pair's
length counts for the frames of both its ends. A segment with a start not ended in it, or an end not started in it
(``SegmentReach.unpaired``), is read by every window, so that the other end, in another segment, always finds it (an
open-ended start is shown from its start on). Of a segment that is read, the frames that hold paired events are read
whatever their times, so that a pair is never seen by one end: a start whose end went unread would show open-ended.

A reader measures a segment the first time a window needs it (each frame's ``kind`` and ``dur`` columns, in C where
it is built: ``_reach.c``, the twin of ``frame_reach``; the ``name`` and ``ts`` columns of a frame that holds paired
events, and its args if they are async, for their ids) and keeps the result with the segment (``ReachCache``): a
sealed segment is measured once, an open one again when it has more frames than when last measured. It is needed only
for segments and frames that the index alone would leave out (about 60 ns an event in C, once).
"""

from __future__ import annotations

from array import array
from typing import Any, Final, NamedTuple

import msgpack
from ringtrace.collector.read.pool import let_the_loop_in
from ringtrace.collector.store.views import SegmentView
from ringtrace.wire.decoder import SessionDecoder
from ringtrace.wire.errors import ProtocolError
from ringtrace.wire.frame_types import EVENT_COLUMNS
from ringtrace.wire.frames import Events
from ringtrace.wire.optional_c import load_optional
from ringtrace.wire.stream_limits import Limits
from ringtrace.wire.stream_tables import StreamTables

__all__ = ["NO_REACH", "UNBOUNDED", "Reach", "SegmentReach", "frame_reach", "measure", "segment_reach"]

#: (back ns, ahead ns)
Reach = tuple[int, int]
#: A reach past any wall-clock time: what a start not ended (or an end not started) in its segment reaches.
UNBOUNDED: Final = 2**63 - 1
NO_REACH: Final[Reach] = (0, 0)


class SegmentReach(NamedTuple):
    """A segment's reach, frame by frame (in the index's order), and which of its frames hold paired events."""

    #: Per EVENTS frame: the longest before one of its ends that its pair started, the longest any of its events lasts.
    back: array[int]
    ahead: array[int]
    #: Per EVENTS frame: 1 if it holds paired events.
    paired: bytes
    #: Whether a pair has one end here and the other in another segment (or none): then the segment is always read.
    unpaired: bool

    def of_frame(self, entry: int) -> Reach:
        """The ``entry``-th EVENTS frame's reach (an unknown one reaches anywhere)."""
        if entry >= len(self.ahead):
            return _FAR
        return self.back[entry], self.ahead[entry]

    def holds_pairs(self, entry: int) -> bool:
        """Whether the ``entry``-th EVENTS frame holds paired events (an unknown frame may)."""
        return entry >= len(self.paired) or bool(self.paired[entry])


_FAR: Final[Reach] = (UNBOUNDED, UNBOUNDED)
#: What a segment that cannot be measured reaches: anything, every frame (it is read, its reader counts what breaks).
_ANYWHERE: Final = SegmentReach(array("q"), array("q"), b"", True)
#: Bytes given to the decoder at a time (a copy holds the GIL: ``frame_walk.segment_stream``).
_READ_BYTES: Final = 256 * 1024
_STARTS: Final = {"marker_start": "marker_end", "source_open": "source_close", "async_begin": "async_end"}
_ENDS: Final = frozenset(_STARTS.values())
#: Kind codes (``_reach.c``'s too): lasts (a span, a traced call), pairs, neither.
_OTHER: Final = 0
_LASTS: Final = 1
_PAIRS: Final = 2
#: Past this kind id the C twin is not asked (a table indexed by id would be too large).
_MAX_KIND_ID: Final = 1 << 16
_c = load_optional("ringtrace.collector.read._reach")


def segment_reach(segment: SegmentView, limits: Limits) -> SegmentReach:
    """The segment's reach, measured once for the frames the view holds (kept with the segment)."""
    cache = segment.reach
    cached = cache.value
    if cached is not None and cached[0] == segment.entries and isinstance(cached[1], SegmentReach):
        return cached[1]
    measured = measure(segment, limits)
    if cached is None or cached[0] < segment.entries:  # (an older view holds fewer frames: not kept)
        cache.value = (segment.entries, measured)
    return measured


def measure(segment: SegmentView, limits: Limits, *, accelerated: bool = True) -> SegmentReach:
    """The reach of the segment's events (``_ANYWHERE`` for a stream that breaks: it is read whole); ``accelerated``
    False measures every frame here, not in the C twin (the same result)."""
    decoder = SessionDecoder(limits, live=False)
    pairs = _Pairs(accelerated)
    try:
        for start in range(0, segment.used, _READ_BYTES):
            segment.read_into(decoder, start, min(start + _READ_BYTES, segment.used))
            for frame in decoder:
                if type(frame) is Events:
                    let_the_loop_in()
                    pairs.read(decoder.tables, frame)
        decoder.receive_data(b"")
        for frame in decoder:
            if type(frame) is Events:
                pairs.read(decoder.tables, frame)
    except (ProtocolError, _Unmeasurable, TypeError):  # (TypeError: a name that cannot pair, unhashable)
        return _ANYWHERE
    return pairs.reach()


class _Unmeasurable(Exception):
    """A payload whose times cannot be read: the segment reaches anywhere."""


class _Pairs:
    """Each frame's longest duration and pair so far, and the starts not yet ended (with their frames), by what pairs
    them."""

    __slots__ = ("_accelerated", "_codes", "ahead", "back", "open", "paired", "unpaired")

    def __init__(self, accelerated: bool) -> None:
        self._accelerated = accelerated
        self._codes = _CodeTables()
        self.ahead = array("q")
        self.back = array("q")
        self.open: dict[tuple[Any, ...], list[tuple[int, int]]] = {}
        self.paired = bytearray()
        self.unpaired = False

    def read(self, tables: StreamTables, frame: Events) -> None:
        entry = len(self.ahead)
        codes = self._codes.of(tables)
        ahead, paired = frame_reach(tables, frame, codes, accelerated=self._accelerated)
        self.ahead.append(ahead)
        self.back.append(0)
        self.paired.append(paired)
        if not paired:
            return
        kinds, names, stamps, args = _columns(tables, frame, ("kind", "name", "ts"), async_ids=codes.has_async)
        first, track = frame.first_ts_ns, frame.track_id
        shapes = codes.pairing
        for index, kind_id in enumerate(kinds):
            shape = shapes.get(kind_id) if type(kind_id) is int else None
            if shape is None:
                continue
            ts = stamps[index]
            if type(ts) is not int:
                raise _Unmeasurable
            self._pair(shape, _key(shape, track, names[index], args, index), first + ts, entry)

    def _pair(self, shape: str, key: tuple[Any, ...], ts: int, entry: int) -> None:
        if shape in _STARTS:
            self.open.setdefault(key, []).append((ts, entry))
            return
        starts = self.open.get(key)
        if not starts:
            self.unpaired = True  # its start is in an earlier segment (or none: an anomaly, shown where it is)
            return
        started, start_entry = starts.pop()
        length = min(abs(ts - started), UNBOUNDED)  # (a marker made after the fact may end before its start)
        for at in (start_entry, entry):
            self.ahead[at] = max(self.ahead[at], length)
            self.back[at] = max(self.back[at], length)

    def reach(self) -> SegmentReach:
        unpaired = self.unpaired or any(self.open.values())
        return SegmentReach(self.back, self.ahead, bytes(self.paired), unpaired)


def _key(shape: str, track: int, name: Any, args: list[Any] | None, index: int) -> tuple[Any, ...]:
    """What pairs a start with its end, as a snapshot pairs them: a marker by track and name, source activity by
    track, an async slice by its id (``event_walk.py``, ``async_pairs.py``)."""
    family = shape.split("_")[0]
    if family == "marker":
        return (family, track, name)
    if family == "source":
        return (family, track)
    value = args[index] if args is not None else None
    return (family, str(value.get("id", "")) if type(value) is dict else "")


class _Codes(NamedTuple):
    """What each kind id of a segment's tables is to a reach: ``table`` the C twin's byte per id (None where ids are
    too large to index), ``by_id`` the same as a map, ``pairing`` the shapes that pair, by id."""

    table: bytes | None
    by_id: dict[int, int]
    pairing: dict[int, str]
    has_async: bool


class _CodeTables:
    """The codes of the tables last met (a segment's tables only grow; a reset makes new ones)."""

    __slots__ = ("_codes", "_kinds", "_tables")

    def __init__(self) -> None:
        self._tables: StreamTables | None = None
        self._kinds = -1
        self._codes = _Codes(b"", {}, {}, False)

    def of(self, tables: StreamTables) -> _Codes:
        if tables is not self._tables or len(tables.kinds) != self._kinds:
            self._tables, self._kinds = tables, len(tables.kinds)
            by_id = {kind_id: _code(kind.shape) for kind_id, kind in tables.kinds.items()}
            table = None
            if not by_id or 0 <= min(by_id) <= max(by_id) < _MAX_KIND_ID:
                table = bytes(by_id.get(kind_id, _OTHER) for kind_id in range(max(by_id, default=-1) + 1))
            pairing = {kind_id: kind.shape for kind_id, kind in tables.kinds.items() if by_id[kind_id] == _PAIRS}
            self._codes = _Codes(table, by_id, pairing, any(s.startswith("async_") for s in pairing.values()))
        return self._codes


def _code(shape: str) -> int:
    return _LASTS if shape == "span" else _PAIRS if shape in _STARTS or shape in _ENDS else _OTHER


def frame_reach(tables: StreamTables, frame: Events, codes: _Codes, *, accelerated: bool = True) -> tuple[int, bool]:
    """(ahead, paired) of a frame: the longest duration of its events that last (spans, traced calls), capped at
    ``UNBOUNDED``, and whether any pairs. In C where built (``_reach.c``, its twin), else here."""
    columns = tables.columns
    order = tuple(map(columns.index, EVENT_COLUMNS)) if len(columns) == len(EVENT_COLUMNS) else None
    if accelerated and _c is not None and codes.table is not None and order is not None:
        measured = _c.frame_reach(frame.payload, frame.count, order, codes.table)
        if measured is not None:  # (None: a payload this side reads, and decides on)
            ahead, paired = measured
            return int(ahead), bool(paired)
    kinds, durations, _ = _columns(tables, frame, ("kind", "dur"))
    by_id = codes.by_id
    ahead, paired = 0, False
    for kind_id, duration in zip(kinds, durations, strict=True):
        code = by_id.get(kind_id, _OTHER) if type(kind_id) is int else _OTHER
        if code == _LASTS:
            if type(duration) is not int:
                raise _Unmeasurable
            ahead = max(ahead, duration)
        elif code == _PAIRS:
            paired = True
    return min(ahead, UNBOUNDED), paired


def _columns(tables: StreamTables, frame: Events, wanted: tuple[str, ...], *, async_ids: bool = False) -> list[Any]:
    """The ``wanted`` columns of the frame, then its args if ``async_ids`` (async events need their ids), else None:
    the other columns are skipped unread."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=len(frame.payload) or 1)
    try:
        unpacker.feed(frame.payload)
        if unpacker.read_array_header() != len(tables.columns):
            raise _Unmeasurable
        found: dict[str, list[Any]] = {}
        for name in tables.columns:
            if name in wanted:
                found[name] = unpacker.unpack()
            else:
                unpacker.skip()
    except Exception as exc:  # (msgpack's errors for a malformed payload are of several kinds)
        raise _Unmeasurable from exc
    columns = [found.get(name) for name in wanted]
    if any(type(column) is not list or len(column) != frame.count for column in columns):
        raise _Unmeasurable
    args = None
    if async_ids:
        try:
            args = tables.unpack(frame)[tables.columns.index("args")]
        except Exception as exc:
            raise _Unmeasurable from exc
    return [*columns, args]
