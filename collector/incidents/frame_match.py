"""The rules' first pass over a stored EVENTS frame: which of its events may meet a rule (its candidates), found from
the kind, name and duration columns alone, without a Python object per event.

Theory of operation
-------------------
The rules a segment is watched for are compiled against its tables (``criteria.py``) into ``Criteria``: per kind id a
*criterion* (the least duration that makes an event of the kind a candidate, and flags) and a *name group*, and per
name group a criterion per string id (a name's glob is matched once per string, never per event). An event is a
candidate when its kind's criterion or its name's criterion in its kind's group passes:

- its ``dur`` is at least the criterion's least duration (``NEVER``: no duration does; ``ANY``: every event does), or
- the criterion has ``STATUS_ERROR`` and the event's args map says ``"status": "error"`` (an OTLP span's status), or
- the criterion (a name's) has ``CROSSING`` and the event's ``value`` passes other thresholds of its name than the
  name's last value did (its *signature*: how many of the name's ``above`` thresholds it is above, and how many
  ``below`` ones it is below, kept in ``Criteria.state`` with the track it was on): a value that passes the same
  thresholds as the one before cannot be a crossing, so a counter's rules cost only the values that change sides.

What depends on each rule (its own duration, a counter's crossing from that counter's last value, a message's text)
is judged on the candidates alone: a run's by the rules' verdicts (``rule_verdicts.py``, which leave to Python the
messages whose values only it renders), a frame read alone in Python (``judge.py``), each candidate's args decoded
alone (``OUT_SLOTS`` give where they are in the payload).

``match_run`` takes a run of a segment's EVENTS frames at once (one call, without the GIL in C, however many frames):
those that follow one another from an index entry on, each one ``Events.decode_body`` and ``match_frame`` take. It
stops before a gap (session frames: the decoder reads them, and the criteria may change) and before a frame it does
not take, which the caller reads alone, so that the Python work of a run is one call and its candidates.

``match_frame`` runs the C twin (``_match.c``) where it was built and the Python twin (``match_frame_py``, which
defines the behaviour) otherwise, or where the C twin leaves a payload to it (nested deeper than it reads). Both
take the payload as untrusted: one msgpack-python refuses, or whose ``kind``, ``name``, ``ts`` or ``dur`` is not an
integer of 64 bits, gives None (no candidates can be told: the caller counts the frame's events undecodable). The
payload is read for its structure only (``_read_columns``: a str's bytes taken as they are, a map's keys never
hashed), which is what costs little in C; an event's args are read strictly, as the rules' verdicts and the judge
read a candidate's, only where a criterion needs them (a status, a counter's value): args that do not read so say
nothing (no status, no value), as they say nothing to the verdicts.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import msgpack
from ringtrace.collector.store.segments import INDEX_ENTRY
from ringtrace.wire.errors import MalformedFrame
from ringtrace.wire.frame_types import FRAME_HEADER
from ringtrace.wire.frames import Events
from ringtrace.wire.optional_c import load_optional

__all__ = [
    "ACCELERATED",
    "ANY",
    "COUNTER_SLOTS",
    "CROSSING",
    "KIND_SLOTS",
    "MAX_GROUPS",
    "NAME_SLOTS",
    "NEVER",
    "RUN_SLOTS",
    "STATE_SLOTS",
    "STATUS_ERROR",
    "Criteria",
    "candidates",
    "match_frame",
    "match_frame_py",
    "match_run",
    "match_run_py",
    "run_candidates",
]

_match = load_optional("ringtrace.collector.incidents._match")
#: Whether the C twin is there.
ACCELERATED: Final = _match is not None

#: A criterion's least duration that no event passes, and one that every event passes.
NEVER: Final = 2**63 - 1
ANY: Final = -(2**63)
#: A criterion's flags: an event whose args map says ``"status": "error"`` is a candidate whatever its duration; a
#: counter's value that passes other thresholds than its name's last value did is one (a name's criterion only).
STATUS_ERROR: Final = 1
CROSSING: Final = 2
#: int64s per kind id (least duration, flags, name group or -1), per string id of a group (least duration, flags),
#: per string id of a counter (where its thresholds start, how many are ``above``, how many ``below``), of state
#: per string id of a counter (its last value's track + 1, or 0; that value's signature), and per candidate found
#: (index in the frame, kind id, name id, ts column value, dur, where its args start and end in the payload).
KIND_SLOTS: Final = 3
NAME_SLOTS: Final = 2
COUNTER_SLOTS: Final = 3
STATE_SLOTS: Final = 2
OUT_SLOTS: Final = 7
#: int64s per candidate of a run (kind id, name id, ts column value, dur, where its args start and end in the
#: segment's buffer, the frame's track and first ts).
RUN_SLOTS: Final = 8
MAX_GROUPS: Final = 16
_INT64: Final = range(-(2**63), 2**63)
_ARGS: Final = 4
#: How deep the C twin reads an args value (MAX_DEPTH in C: the top value is at 0).
_C_DEPTH: Final = 32


@dataclass(slots=True)
class Criteria:
    """A segment's compiled rules as both twins read them (see the module docstring)."""

    #: ``KIND_SLOTS`` int64s per kind id, from 0; kinds past the end are never candidates.
    kinds: array[int] = field(default_factory=lambda: array("q"))
    #: Per name group, ``NAME_SLOTS`` int64s per string id, from 0; ids past the end have no criterion.
    names: tuple[array[int], ...] = ()
    #: Counters' thresholds (``COUNTER_SLOTS`` int64s per string id, into ``thresholds``) and state (written).
    counters: array[int] = field(default_factory=lambda: array("q"))
    thresholds: array[float] = field(default_factory=lambda: array("d"))
    state: array[int] = field(default_factory=lambda: array("q"))


def match_frame(
    payload: bytes | memoryview, count: int, columns: tuple[int, ...], track: int, criteria: Criteria
) -> bytes | None:
    """The candidates of an EVENTS frame, ``OUT_SLOTS`` native int64s each (``candidates`` reads them); None if the
    payload cannot be read (then no counter's state changed).

    Args:
        payload: the frame's msgpack payload.
        count: its header's event count.
        columns: where the kind, name, ts, dur and args columns are in it (a permutation of 0 to 4).
        track: the frame's track id (counters' state tells tracks apart).
    """
    if _match is not None:
        found: bytes | None = _match.match_frame(
            payload, count, columns, track, criteria.kinds, criteria.names,
            criteria.counters, criteria.thresholds, criteria.state,
        )  # fmt: skip
        if found is not None:
            return found
    return match_frame_py(payload, count, columns, track, criteria)


def match_frame_py(
    payload: bytes | memoryview, count: int, columns: tuple[int, ...], track: int, criteria: Criteria
) -> bytes | None:
    """``match_frame`` in Python: what defines it."""
    read = _read_columns(payload, count, columns)
    if read is None:
        return None
    (kinds, names, offsets, durations, args), spans = read
    for column in (kinds, names, offsets, durations):  # all of them first: a frame refused changes no state
        if any(type(value) is not int or value not in _INT64 for value in column):
            return None
    table, groups = criteria.kinds, criteria.names
    kind_count = len(table) // KIND_SLOTS
    out = array("q")
    for i, (kind, name, ts, dur) in enumerate(zip(kinds, names, offsets, durations, strict=True)):
        if not 0 <= kind < kind_count:
            continue
        strict = _Strict(payload, *spans[i])
        at = kind * KIND_SLOTS
        hit = _meets(table[at], table[at + 1] & ~CROSSING, dur, args[i], strict, None, name, track)
        group = table[at + 2]
        if 0 <= group < len(groups) and 0 <= name < len(groups[group]) // NAME_SLOTS:
            names_of = groups[group]
            flags = names_of[name * NAME_SLOTS + 1]
            if not hit or flags & CROSSING:
                hit = _meets(names_of[name * NAME_SLOTS], flags, dur, args[i], strict, criteria, name, track) or hit
        if hit:
            out.extend((i, kind, name, ts, dur, *spans[i]))
    return out.tobytes()


class _Strict:
    """An event's args read strictly (as msgpack-python unpacks them alone), once, where a criterion needs them; None
    where they do not read so."""

    __slots__ = ("_end", "_payload", "_read", "_start", "_value")

    def __init__(self, payload: bytes | memoryview, start: int, end: int) -> None:
        self._payload, self._start, self._end, self._read, self._value = payload, start, end, False, None

    def __call__(self) -> Any:
        if not self._read:
            self._read = True
            try:
                self._value = msgpack.unpackb(self._payload[self._start : self._end], raw=False, strict_map_key=False)
            except Exception:
                self._value = None
        return self._value


class _Pairs(tuple):  # type: ignore[type-arg]
    """A map as ``_read_columns`` reads it: its (key, value) pairs, its keys never hashed."""

    __slots__ = ()


def match_run(
    buffer: bytes | bytearray | memoryview,
    size: int,
    entries: int,
    entry: int,
    position: int,
    end: int,
    columns: tuple[int, ...],
    criteria: Criteria,
) -> tuple[bytes, int, int, int]:
    """The candidates of the run of EVENTS frames from index entry ``entry`` of a segment (see the module docstring),
    ``RUN_SLOTS`` native int64s each (``run_candidates`` reads them), the index entries it read, their events (as
    the index counts them) and where the run ended.

    Args:
        buffer, size: the segment's buffer, and its size (its index ends there).
        entries: its index entries; ``entry``: the first of the run.
        position: where the run begins (the first frame must begin there); ``end``: no frame beginning at or past
            it is read.
        columns: where the kind, name, ts, dur and args columns are in a payload.
    """
    if _match is not None:
        found: tuple[bytes, int, int, int] = _match.match_run(
            buffer, size, entries, entry, position, end, columns, criteria.kinds, criteria.names,
            criteria.counters, criteria.thresholds, criteria.state,
        )  # fmt: skip
        return found
    return match_run_py(buffer, size, entries, entry, position, end, columns, criteria)


def match_run_py(
    buffer: bytes | bytearray | memoryview,
    size: int,
    entries: int,
    entry: int,
    position: int,
    end: int,
    columns: tuple[int, ...],
    criteria: Criteria,
) -> tuple[bytes, int, int, int]:
    """``match_run`` in Python: what defines it."""
    view = memoryview(buffer)
    out, read, events = array("q"), 0, 0
    while entry + read < entries and size <= len(view):
        at = size - INDEX_ENTRY.size * (entry + read + 1)
        if at < 0:
            break
        offset, length, _, indexed, _, _ = INDEX_ENTRY.unpack_from(view, at)
        if offset >= end or offset != position or offset + length > len(view):
            break
        try:
            frame = Events.decode_body(view[offset + FRAME_HEADER.size : offset + length])
        except MalformedFrame:
            break
        if frame.first_ts_ns > _INT64.stop - 1:  # (the C twin leaves such a frame to the caller)
            break
        found = _match_frame_only(frame, columns, criteria)
        if found is None:
            break
        shift = offset + length - len(frame.payload)
        for _, kind, name, ts, dur, args_start, args_end in candidates(found):
            out.extend((kind, name, ts, dur, args_start + shift, args_end + shift, frame.track_id, frame.first_ts_ns))
        read, events, position = read + 1, events + indexed, offset + length
    return out.tobytes(), read, events, position


def _match_frame_only(frame: Events, columns: tuple[int, ...], criteria: Criteria) -> bytes | None:
    """The frame's candidates as the Python twin finds them, or None where the C twin leaves the frame (one nested
    deeper than ``_C_DEPTH``) or neither takes it: a run stops before it, and the caller reads it alone."""
    read = _read_columns(frame.payload, frame.count, columns)
    if read is None or any(_deeper(value, 0) for value in read[0][_ARGS]):
        return None
    return match_frame_py(frame.payload, frame.count, columns, frame.track_id, criteria)


def _deeper(value: Any, depth: int) -> bool:
    """Whether a value nests deeper than the C twin reads (a map's keys are at its values' depth)."""
    if depth > _C_DEPTH:
        return True
    if type(value) is _Pairs:
        return any(_deeper(key, depth + 1) or _deeper(item, depth + 1) for key, item in value)
    if type(value) in (list, tuple):
        return any(_deeper(item, depth + 1) for item in value)
    return False


def run_candidates(found: bytes) -> Iterator[tuple[int, int, int, int, int, int, int, int]]:
    """(kind id, name id, ts column value, dur, where its args start and end in the buffer, the frame's track and
    first ts) of each candidate ``match_run`` found."""
    values = memoryview(found).cast("q")
    for at in range(0, len(values), RUN_SLOTS):
        yield tuple(values[at : at + RUN_SLOTS])  # type: ignore[misc]


def candidates(found: bytes) -> Iterator[tuple[int, int, int, int, int, int, int]]:
    """(index in the frame, kind id, name id, ts column value, dur, where its args start and end in the payload) of
    each candidate ``match_frame`` found."""
    values = memoryview(found).cast("q")
    for at in range(0, len(values), OUT_SLOTS):
        yield tuple(values[at : at + OUT_SLOTS])  # type: ignore[misc]


def _read_columns(
    payload: bytes | memoryview, count: int, columns: tuple[int, ...]
) -> tuple[list[list[Any]], list[tuple[int, int]]] | None:
    """The five columns in the order kind, name, ts, dur, args, and where each args value is in the payload; None if
    msgpack-python refuses the payload (as ``unpackb`` would, reading a str's bytes as they are and a map as its
    pairs, ``_Pairs``) or it is not five arrays of ``count`` values."""
    read: list[list[Any]] = [[] for _ in columns]
    spans: list[tuple[int, int]] = []
    try:
        unpacker = msgpack.Unpacker(
            raw=False, strict_map_key=False, unicode_errors="surrogateescape", object_pairs_hook=_Pairs,
            max_buffer_size=max(len(payload), 1),
        )  # fmt: skip
        unpacker.feed(payload)
        if unpacker.read_array_header() != len(columns):
            return None
        for position in range(len(columns)):
            if unpacker.read_array_header() != count:
                return None
            which = columns.index(position)
            values = read[which]
            for _ in range(count):
                start = unpacker.tell()
                values.append(unpacker.unpack())
                if which == _ARGS:
                    spans.append((start, unpacker.tell()))
        if unpacker.tell() != len(payload):
            return None
    except Exception:
        return None
    return read, spans


def _meets(
    min_dur: int,
    flags: int,
    dur: int,
    args: Any,
    strict: Callable[[], Any],
    criteria: Criteria | None,
    name: int,
    track: int,
) -> bool:
    """Whether an event meets a criterion (its args as ``_read_columns`` reads them, and ``strict``ly; a counter's
    state brought up to date first): a counter's value is read from its args read strictly (the values the verdicts
    see), a status from its args' pairs however they read (the verdicts then decide)."""
    changed = bool(flags & CROSSING) and criteria is not None and _counter_changed(strict(), criteria, name, track)
    if changed or (min_dur != NEVER and dur >= min_dur):
        return True
    if not flags & STATUS_ERROR or type(args) is not _Pairs:
        return False
    statuses = [value for key, value in args if type(key) is str and key == "status"]
    return bool(statuses) and type(statuses[-1]) is str and statuses[-1] == "error"


def _counter_changed(args: Any, criteria: Criteria, name: int, track: int) -> bool:
    """Whether a counter's value passes other thresholds than its name's last value (see the module docstring)."""
    value = args.get("value") if type(args) is dict else None
    if name >= len(criteria.counters) // COUNTER_SLOTS or not isinstance(value, int | float) or type(value) is bool:
        return False
    start, above, below = criteria.counters[name * COUNTER_SLOTS : (name + 1) * COUNTER_SLOTS]
    thresholds = criteria.thresholds
    if not (0 <= start <= len(thresholds) and 0 <= above <= len(thresholds) - start):
        return False
    if not 0 <= below <= len(thresholds) - start - above:
        return False
    value = float(value)
    passed_above = sum(value > t for t in thresholds[start : start + above])
    passed_below = sum(value < t for t in thresholds[start + above : start + above + below])
    signature = passed_above * (below + 1) + passed_below
    state = criteria.state
    if name >= len(state) // STATE_SLOTS:
        return True
    at = name * STATE_SLOTS
    if state[at] == track + 1 and state[at + 1] == signature:
        return False
    state[at], state[at + 1] = track + 1, signature
    return True
