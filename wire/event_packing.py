"""How a run of drained events becomes EVENTS frames, in C or in Python: chosen once, when a stream encoder is made.

The Python path is column-wise and runs in C all the same: strided slices (``records[2::5]``) split a track's flat
buffer into columns, ``map`` over the string table turns labels into ids, ``map(operator.sub, ...)`` turns timestamps
into offsets and durations, and msgpack packs the columns. Argument maps are normalised on the way
(``model.normalise_args``) so that anything a user passes is carried, clipped with a mark if it must be, and never
costs another event. With the C packer (``ringtrace.wire._packer``, built from ``packer/``) the arguments of the common
shapes (none, maps of text keys and flat values, messages' flat values) are packed in C, which leaves the rest to
``_packed_args``: the same bytes as the pure-Python path either way. A run whose events all have those shapes (the
usual case) is packed into its whole frame in one C pass (``pack_events``): one call and one copy a run, so that the
flusher keeps up with a thread that does nothing but record.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from itertools import compress, repeat
from operator import sub
from typing import Any, Final, NamedTuple

import msgpack
from ringtrace.wire.arg_values import MAX_ARG_ITEMS, MAX_ARG_TEXT, normalise_args, normalise_values, safe_str
from ringtrace.wire.errors import FrameTooLarge, InvalidField
from ringtrace.wire.frames import Events, encode
from ringtrace.wire.keyword_args import KEYWORDS, as_map, with_maps
from ringtrace.wire.model import RECORD_FIELDS, KindRegistry
from ringtrace.wire.optional_c import load_optional
from ringtrace.wire.string_table import StringTable

__all__ = ["ACCELERATED", "EncodedBatch", "EventColumns", "EventPacking"]

#: Types an argument value may have for its map to be packed as it is, without a normalising pass.
_FLAT: Final = frozenset({str, int, float, bool, type(None), bytes})

_c_packer = load_optional("ringtrace.wire._packer")
#: The arguments of an event that is neither typed nor a message: none, a map, keywords, a sample's stack id.
_MAP_ARGS: Final = frozenset({type(None), dict, int} | ({KEYWORDS} if KEYWORDS is not None else set()))
#: Whether the C packer is here (built, and not turned off by ``RINGTRACE_PURE_PYTHON``): a stream encoder's default.
ACCELERATED: Final = _c_packer is not None

log = logging.getLogger("ringtrace.client")


def _to_msgpack(value: object) -> object:
    """msgpack's fallback for types it does not know (the normalising pass catches the rest)."""
    return safe_str(value)


class EventColumns(NamedTuple):
    """A run of events, column by column: the EVENTS payload before timestamps become offsets."""

    kinds: Sequence[int]
    names: Sequence[int]
    starts: Sequence[int]
    ends: Sequence[int]
    args: Sequence[Any]


class EncodedBatch:
    """The frames for one drained run: control frames first (the tables the events use), then EVENTS frames."""

    __slots__ = ("control", "dropped_events", "epoch", "events")

    def __init__(self, epoch: int = 0) -> None:
        self.control: list[bytes] = []
        #: ``(frame bytes, event count)`` pairs.
        self.events: list[tuple[bytes, int]] = []
        #: Events that could not be packed at all (one event larger than a frame).
        self.dropped_events = 0
        #: The string table's epoch the EVENTS frames were packed in (``StringTable.recycle``).
        self.epoch = epoch

    @property
    def event_count(self) -> int:
        return sum(count for _, count in self.events)


class EventPacking:
    """The part of ``StreamEncoder`` that packs runs of events into EVENTS frames; ``_encode_run`` is the C or the
    Python way, chosen once by ``_choose_packing``."""

    # Kept by StreamEncoder (see there).
    registry: KindRegistry
    strings: StringTable
    max_frame_bytes: int
    clipped_args: int
    rejected_events: int
    _rejected_kinds: set[object]
    _msgpack: msgpack.Packer
    #: ``_encode_run_accelerated`` or ``_encode_run_python``, as a plain function (a bound method kept on the
    #: instance would make it a cycle of its own).
    _run_packing: Callable[[EventPacking, EncodedBatch, int, list[Any]], None]

    def _choose_packing(self, accelerated: bool) -> None:
        if accelerated and _c_packer is None:
            raise ValueError("accelerated=True: the C packer is not in use in this process")
        self._msgpack = msgpack.Packer(default=_to_msgpack)
        self._run_packing = EventPacking._encode_run_accelerated if accelerated else EventPacking._encode_run_python

    def _encode_run(self, batch: EncodedBatch, track_id: int, records: list[Any]) -> None:
        """Append the frames of one run of at most ``max_events_per_frame`` events to ``batch``."""
        self._run_packing(self, batch, track_id, records)

    def _encode_run_accelerated(self, batch: EncodedBatch, track_id: int, records: list[Any]) -> None:
        """``_encode_run`` with the C packer: the whole run in C where it can be, else the Python way."""
        table = self.strings
        counters = table.overflowed, self.clipped_args, self.rejected_events
        try:
            packed = self._pack_accelerated(track_id, records)
            if packed is not None:
                batch.events.append(packed)
            return
        except FrameTooLarge:  # halves, as the Python path splits them, where it splits the same events
            table.overflowed, self.clipped_args, self.rejected_events = counters
            count = len(records) // RECORD_FIELDS
            if count > 1 and _untyped(records):
                half = math.ceil(count / 2) * RECORD_FIELDS
                self._encode_run_accelerated(batch, track_id, records[:half])
                self._encode_run_accelerated(batch, track_id, records[half:])
                return
        except Exception:  # an unhashable label...: the general way, counting all again
            table.overflowed, self.clipped_args, self.rejected_events = counters
        self._encode_run_python(batch, track_id, records)

    def _encode_run_python(self, batch: EncodedBatch, track_id: int, records: list[Any]) -> None:
        """``_encode_run`` in Python: what defines the bytes."""
        table = self.strings
        records = self._with_typed_values(with_maps(records))
        if not records:
            return
        overflowed = table.overflowed
        kinds, labels, starts, ends, args = (records[column::RECORD_FIELDS] for column in range(RECORD_FIELDS))
        try:
            names = list(map(table.__getitem__, labels))
        except Exception:  # an unhashable label: look all up again, counting overflow once
            table.overflowed = overflowed
            names = [_label_id(table, label) for label in labels]
        self._encode_columns(batch, track_id, EventColumns(kinds, names, starts, ends, self._normalised(args)))

    def _pack_accelerated(self, track_id: int, records: list[Any]) -> tuple[bytes, int] | None:
        """One EVENTS frame for ``records`` packed in C (None when every event was left out), the arguments too where
        they have the common shapes, the rest through ``_packed_args``; raises where ``_pack`` would adapt.

        The arguments go first, as ``_with_typed_values`` does: an event left out never names a string."""
        assert _c_packer is not None
        table = self.strings
        overflowed = table.overflowed
        converters = self.registry.converters
        frame = _c_packer.pack_events(records, table, converters, normalise_values, track_id, self.max_frame_bytes)
        if frame is not None:  # the common shapes, the whole frame in one pass
            return frame, len(records) // RECORD_FIELDS
        table.overflowed = overflowed  # the labels looked up before it gave up are looked up again below
        packed_args, rejected = _c_packer.pack_args(records, converters, normalise_values, self._packed_args)
        if rejected:
            records = _without(records, rejected)
            if not records:
                return None
        head, first_ns, last_ns, arg_maps = _c_packer.pack_columns(records, table)
        assert (arg_maps is None) == (packed_args is None)
        payload = head if packed_args is None else head + packed_args
        count = len(records) // RECORD_FIELDS
        return encode(Events(track_id, count, first_ns, last_ns, payload), self.max_frame_bytes), count

    def _packed_args(self, kind: object, args: Any) -> bytes | None:
        """One event's arguments as the Python path packs them (``_with_typed_values``, ``_normalised``, ``_pack``),
        or None for an event left out: what C leaves to Python (nested or large values, other types, ...)."""
        if type(args) is int:  # a sample's stack id
            packed_id: bytes = self._msgpack.pack(args)
            return packed_id
        args = as_map(args)
        if args is not None and type(args) is not dict:
            args = self._typed_values(kind, args)
            if args is None:
                return None
        args = self._normalised([args])[0]
        packed: bytes
        try:
            packed = self._msgpack.pack(args)
        except Exception:  # a flat value msgpack still refuses (a lone surrogate), as in _pack
            packed = self._msgpack.pack(self._normalise(args))
        return packed

    def _with_typed_values(self, records: list[Any]) -> list[Any]:
        """``records`` with each argument that is not a map (a typed event, a message's values) turned into its wire
        values by its kind's converter; an event whose values do not fit their types is left out, counted in
        ``rejected_events``, with one warning per kind."""
        args = records[4::RECORD_FIELDS]
        if args.count(None) == len(args):  # no arguments at all (counted in C): the usual case
            return records
        # Selected by type, not by truth: an Event subclass may define __bool__.
        tuples = [i for i, arg in enumerate(args) if arg is not None and type(arg) is not dict and type(arg) is not int]
        if not tuples:
            return records
        records = list(records)
        rejected = []
        for i in tuples:
            values = self._typed_values(records[i * RECORD_FIELDS], args[i])
            if values is None:
                rejected.append(i)
            else:
                records[i * RECORD_FIELDS + 4] = values
        return _without(records, rejected) if rejected else records

    def _typed_values(self, kind: Any, values: Any) -> list[Any] | None:
        """The wire values of one typed event or message (its kind's converter), or None for an event whose values
        do not fit their types: counted in ``rejected_events``, with one warning per kind."""
        convert = self.registry.converters.get(kind)
        try:
            if convert is None:
                raise InvalidField(f"event kind {kind!r:.40} takes a map of arguments, got {type(values).__name__}")
            converted, clipped = convert(values)
            self.clipped_args += clipped
        except Exception as exc:  # InvalidField, or a converter tripped by a value: the event, not the run
            self.rejected_events += 1
            if kind not in self._rejected_kinds:
                self._rejected_kinds.add(kind)
                log.warning("ringtrace: %s; such events are dropped and counted (rejected_events)", exc)
            return None
        return converted

    def _normalised(self, args: list[Any]) -> list[Any]:
        """``args`` with every map that holds more than flat values normalised (see ``model.normalise_args``)."""
        if args.count(None) == len(args):  # no event has arguments: nothing to look at (counted in C)
            return args
        for i in compress(range(len(args)), args):  # the events with (non-empty) maps only
            arg = args[i]
            if type(arg) is list or type(arg) is int:  # a typed event's values (checked already), a sample's stack id
                continue
            if len(arg) > MAX_ARG_ITEMS:
                args[i], clipped = normalise_args(arg)
                self.clipped_args += clipped
                continue
            for value in arg.values():
                kind = type(value)
                if kind not in _FLAT or ((kind is str or kind is bytes) and len(value) > MAX_ARG_TEXT):
                    args[i], clipped = normalise_args(arg)
                    self.clipped_args += clipped
                    break
        return args

    def _encode_columns(self, batch: EncodedBatch, track_id: int, columns: EventColumns) -> None:
        count = len(columns.kinds)
        try:
            frame = self._pack(track_id, columns)
        except FrameTooLarge:
            if count == 1:
                batch.dropped_events += 1
                return
            half = math.ceil(count / 2)
            for part in (slice(None, half), slice(half, None)):
                self._encode_columns(batch, track_id, EventColumns(*(column[part] for column in columns)))
            return
        batch.events.append((frame, count))

    def _pack(self, track_id: int, columns: EventColumns) -> bytes:
        kinds, names, starts, ends, args = columns
        first_ns = min(starts)
        # Instants end where they start (the same int objects: the comparison is by identity, in C).
        durations = [0] * len(starts) if ends == starts else list(map(sub, ends, starts))
        packed = [kinds, names, list(map(sub, starts, repeat(first_ns))), durations, args]
        try:
            payload = self._msgpack.pack(packed)
        except Exception:  # a flat value msgpack still refuses (a lone surrogate): normalise the maps it is in
            packed[4] = [a if a is None or self._packable(a) else self._normalise(a) for a in args]
            payload = self._msgpack.pack(packed)
        return encode(Events(track_id, len(kinds), first_ns, max(ends), payload), self.max_frame_bytes)

    def _packable(self, value: object) -> bool:
        try:
            self._msgpack.pack(value)
        except Exception:
            return False
        return True

    def _normalise(self, args: dict[str, Any]) -> dict[str, Any]:
        normalised, clipped = normalise_args(args)
        self.clipped_args += clipped
        return normalised


def _without(records: list[Any], events: list[int]) -> list[Any]:
    """A copy of ``records`` without the events at the indexes ``events`` (ascending)."""
    records = list(records)
    for i in reversed(events):
        del records[i * RECORD_FIELDS : (i + 1) * RECORD_FIELDS]
    return records


def _label_id(table: StringTable, label: object) -> int:
    try:
        return table[label]
    except Exception:  # unhashable, or its __hash__ or __eq__ raises: its text stands for it
        return table[safe_str(label)]


def _untyped(records: list[Any]) -> bool:
    """Whether no event of ``records`` has a typed event's or a message's values (which the Python path may reject,
    and then splits what is left): the halves of a run too large for a frame are then the Python path's halves."""
    return all(type(args) in _MAP_ARGS for args in records[4::RECORD_FIELDS])
