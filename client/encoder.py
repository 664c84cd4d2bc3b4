"""The stream encoder, sans-I/O: one stream's string table, schema and track list, and drained events to frames.

The fast path is column-wise and runs in C: strided slices (``records[2::5]``) split a track's flat buffer into
columns, ``map`` over the string table turns labels into ids, ``map(operator.sub, ...)`` turns timestamps into
offsets and durations, and msgpack packs the columns. Work is cut into runs of at most ``max_events_per_frame``
events so that no single C call holds the interpreter long enough to stall a recording thread (a few hundred
microseconds each). Argument maps are normalised on the way (``model.normalise_args``) so that anything a user
passes is carried, clipped with a mark if it must be, and never costs another event. With the accelerator the
arguments of the common shapes (none, maps of text keys and flat values, messages' flat values) are packed in C,
which leaves the rest to ``_packed_args``: the same bytes as the pure-Python path either way. A run whose events all
have those shapes (the usual case) is packed into its whole frame in one C pass (``pack_events``): one call and one
copy a run, so that the flusher keeps up with a thread that does nothing but record.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
import uuid
from collections.abc import Iterator, Sequence
from itertools import compress, repeat
from operator import add, sub
from typing import Any, Final, NamedTuple

import msgpack
from ringtrace.client.accelerator import speedups
from ringtrace.client.recording.events import InvalidField
from ringtrace.wire.errors import FrameTooLarge
from ringtrace.wire.frames import (
    DEFAULT_MAX_FRAME_BYTES,
    EVENTS_HEADER,
    FRAME_HEADER,
    MIN_MAX_FRAME_BYTES,
    Events,
    Hello,
    KindSpec,
    Schema,
    Stats,
    Strings,
    Track,
    encode,
)
from ringtrace.wire.keyword_args import as_map, with_maps
from ringtrace.wire.model import (
    KINDS,
    MAX_ARG_ITEMS,
    MAX_ARG_TEXT,
    RECORD_FIELDS,
    KindRegistry,
    StringTable,
    TrackInfo,
    normalise_args,
    normalise_values,
    safe_str,
)
from ringtrace.wire.version import __version__

__all__ = ["EncodedBatch", "ProcessIdentity", "StreamEncoder"]

#: Bytes one STRINGS frame may spend on strings: half the smallest max_frame_bytes a collector accepts.
_STRINGS_FRAME_BUDGET: Final = MIN_MAX_FRAME_BYTES // 2
#: Types an argument value may have for its map to be packed as it is, without a normalising pass.
_FLAT: Final = frozenset({str, int, float, bool, type(None), bytes})


_pack_columns = None if speedups is None else speedups.pack_columns
_pack_args = None if speedups is None else speedups.pack_args
_pack_events = None if speedups is None else speedups.pack_events
#: Kinds per SCHEMA frame.
_KINDS_PER_SCHEMA: Final = 32

log = logging.getLogger("ringtrace.client")


def _to_msgpack(value: object) -> object:
    """msgpack's fallback for types it does not know (the normalising pass catches the rest)."""
    return safe_str(value)


_instance: tuple[int, str] = (0, "")


def _instance_id() -> str:
    """Random per process incarnation: the same for every stream of this process, new in a forked child."""
    global _instance
    pid = os.getpid()
    if _instance[0] != pid:
        _instance = (pid, uuid.uuid4().hex)
    return _instance[1]


class ProcessIdentity:
    """Who this process is, for every stream's HELLO (one ``instance_id`` per process, so that all the streams
    of a process are one process to the collector)."""

    def __init__(self, process_name: str) -> None:
        self.process_name = process_name
        self.pid = os.getpid()
        self.host = socket.gethostname()
        self.instance_id = _instance_id()
        self.boot_id = _boot_id()

    def hello(self, token: str = "") -> Hello:
        """A HELLO for a new stream; ``token`` only for a live connection to a collector that requires it."""
        return Hello(
            pid=self.pid,
            host=self.host,
            process_name=self.process_name,
            instance_id=self.instance_id,
            boot_id=self.boot_id,
            monotonic_ns=time.monotonic_ns(),
            wall_ns=time.time_ns(),
            client_version=__version__,
            token=token,
        )


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


class _Columns(NamedTuple):
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


class StreamEncoder:
    """Turns drained events (flat: ``kind, label, start_ns, end_ns, args`` per event) into the frames of one stream.

    Args:
        max_frame_bytes: frames are split so that none exceeds this.
        max_events_per_frame: a frame holds at most this many events (also the unit of work between pauses).
        max_strings: size of the string table, the overflow label's id included.
        registry: the kinds the stream declares, and what turns typed values into wire values: the process's
            ``KINDS``, or a registry of its own for a stream that carries another system's kinds (a recording
            translated from a foreign format).
    """

    def __init__(
        self,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_events_per_frame: int = 8192,
        max_strings: int = 100_000,
        registry: KindRegistry = KINDS,
    ) -> None:
        self.registry = registry
        self.strings = StringTable(max_strings)
        self.max_frame_bytes = max_frame_bytes
        self.max_events_per_frame = max_events_per_frame
        #: Kinds declared on this stream, by id: the registry's (the process's ``KINDS``) up to ``max_kinds``.
        self.kinds: dict[int, KindSpec] = {}
        #: Kinds a stream may declare (a collector's WELCOME may lower it); events of the rest reach the collector
        #: as events of an unknown kind, which it counts as undecodable.
        self.max_kinds = 1_000
        #: What the texts of the kinds declared may take (a collector's WELCOME sets it), and take; kinds past it are
        #: withheld as those past ``max_kinds`` are.
        self.max_schema_bytes = 2**63 - 1
        self.schema_bytes = 0
        self._withheld: set[int] = set()
        self._warned_withheld: set[int] = set()  # across reconnects: one warning per kind
        #: Typed events dropped because a field's value did not fit its type (one warning per class).
        self.rejected_events = 0
        self._rejected_kinds: set[object] = set()
        #: Tracks declared on this stream, by id.
        self.tracks: dict[int, TrackInfo] = {}
        #: Argument values cut for depth or size, since the stream started.
        self.clipped_args = 0
        self._packer = msgpack.Packer(default=_to_msgpack)

    @property
    def label_overflow_events(self) -> int:
        return self.strings.overflowed

    def stats(self, dropped_events: int, dropped_frames: int, unacknowledged_events: int) -> Stats:
        """The stream's loss counters: the listener's (given) and the encoder's own."""
        return Stats(
            dropped_events,
            dropped_frames,
            self.label_overflow_events,
            self.clipped_args,
            self.rejected_events,
            unacknowledged_events,
        )

    def prefix(self) -> list[bytes]:
        """The frames a new stream needs before any EVENTS: SCHEMA, the whole string table, every live track."""
        self.kinds = {}
        self.schema_bytes = 0
        self._withheld = set()
        frames = self._schema_frames()
        frames += self._strings_frames(self.strings.runs())
        self.strings.take_new()  # all of it is in the prefix
        self.strings.take_reset()  # a new stream's table starts empty
        frames += [encode(_track_frame(track), self.max_frame_bytes) for track in self.tracks.values()]
        return frames

    def declare(self, track: TrackInfo) -> bytes | None:
        """A TRACK frame if ``track`` is new to this stream or renamed, else None."""
        if self.tracks.get(track.track_id) == track:
            return None
        self.tracks[track.track_id] = track
        return encode(_track_frame(track), self.max_frame_bytes)

    def retire(self, track: TrackInfo) -> bytes | None:
        """A TRACK frame ending ``track`` if this stream declared it (its id no longer counts), else None."""
        if self.tracks.pop(track.track_id, None) is None:
            return None
        ended = Track(track.track_id, track.kind, track.name, track.thread_id, track.parent, ended=True)
        return encode(ended, self.max_frame_bytes)

    def encode(self, track: TrackInfo, records: list[Any]) -> EncodedBatch:
        """Frames for one track's drained events, ``RECORD_FIELDS`` values each: if the string table filled while
        packing them and ``recycles``, it starts again and they are packed in the new epoch."""
        declared = self.declare(track)
        known = len(self.kinds) + len(self._withheld)
        schema = self._schema_frames() if known < len(self.registry) and len(self.kinds) < self.max_kinds else []
        table = self.strings
        counters = (table.overflowed, self.clipped_args, self.rejected_events)
        had_strings = bool(table.strings)
        batch = self._encode_events(track.track_id, records)
        if table.recycles and table.overflowed > counters[0] and had_strings:
            # The table filled: start it again and pack the run in the new one (what overflows even so is counted).
            table.overflowed, self.clipped_args, self.rejected_events = counters
            table.recycle()
            batch = self._encode_events(track.track_id, records)
        batch.control = schema + self._strings_frames(table.take_new(), reset=table.take_reset())
        if declared is not None:
            batch.control.insert(0, declared)
        return batch

    def encode_pieces(self, track: TrackInfo, records: list[Any]) -> Iterator[tuple[EncodedBatch, int]]:
        """``encode``, in as many batches as the string table needs, each with the number of events it was given:
        where the table ``recycles`` and the run has more events than the table has room for labels, in pieces of
        half a table's labels, so that the table starting again between two pieces is enough for each (a run of only
        new labels, say, from a thread that recorded faster than the flusher drained)."""
        table = self.strings
        if not table.recycles or len(records) // RECORD_FIELDS <= table.overflow_id - len(table.strings):
            yield self.encode(track, records), len(records) // RECORD_FIELDS
            return
        step = max(table.overflow_id // 2, 1) * RECORD_FIELDS
        for start in range(0, len(records), step):
            piece = records[start : start + step]
            yield self.encode(track, piece), len(piece) // RECORD_FIELDS

    def _encode_events(self, track_id: int, records: list[Any]) -> EncodedBatch:
        batch = EncodedBatch(self.strings.epoch)
        step = self.max_events_per_frame * RECORD_FIELDS
        if not records:  # a renamed track with nothing new
            pass
        elif len(records) <= step:  # the usual case (a drained run): no copy
            self._encode_run(batch, track_id, records)
        else:
            for start in range(0, len(records), step):
                self._encode_run(batch, track_id, records[start : start + step])
        return batch

    def repack(self, frame: bytes, epoch: int | None = None) -> EncodedBatch:
        """An EVENTS frame packed before the collector's limits were known, or in an earlier ``epoch`` of the string
        table, packed again within the limits and in this epoch.

        Frames are split to fit ``max_frame_bytes``; string ids past the (perhaps lowered) table limit become the
        overflow label's id, and those of an earlier epoch the ids of their labels now (``StringTable.labels_of``),
        the table starting again if they fill it. The STRINGS frames the labels need are the batch's control frames.
        """
        header_size, _, track_id, _, first_ns, _ = EVENTS_HEADER.unpack_from(frame, FRAME_HEADER.size)
        kinds, names, offsets, durations, args = msgpack.unpackb(
            memoryview(frame)[FRAME_HEADER.size + header_size :], raw=False, strict_map_key=False
        )
        table = self.strings
        if epoch is not None and epoch != table.epoch:
            labels = table.labels_of(epoch, names)
            before = (table.overflowed, len(table.strings))
            names = self._ids_of(labels)
            if table.recycles and table.overflowed > before[0] and before[1]:  # the table filled: as ``encode`` does
                table.overflowed = before[0]
                table.recycle()
                names = self._ids_of(labels)
        else:
            cut = table.cut_ids
            table.overflowed += sum(1 for n in names if n in cut)  # those packed with an overflow id are counted
            names = list(map(table.clamp, names))
        starts = [first_ns + offset for offset in offsets]
        batch = EncodedBatch(table.epoch)
        self._encode_columns(batch, track_id, _Columns(kinds, names, starts, list(map(add, starts, durations)), args))
        batch.control = self._strings_frames(table.take_new(), reset=table.take_reset())
        return batch

    def _ids_of(self, labels: list[str | None]) -> list[int]:
        """String ids for labels carried over from an earlier epoch (None: the overflow label)."""
        table = self.strings
        if None in labels:
            table.overflow_used = True
        overflow_id = table.overflow_id
        return [overflow_id if label is None else table[label] for label in labels]

    def _schema_frames(self) -> list[bytes]:
        """SCHEMA frames declaring the process's kinds not yet declared here (at most ``max_kinds`` in all)."""
        new: list[KindSpec] = []
        for kind in self.registry.since(0):
            if kind.id in self.kinds or kind.id in self._withheld or len(self.kinds) + len(new) >= self.max_kinds:
                continue
            size = kind.text_bytes
            if self.schema_bytes + size > self.max_schema_bytes:
                self._withheld.add(kind.id)
                if kind.id in self._warned_withheld:
                    continue
                self._warned_withheld.add(kind.id)
                log.warning(
                    "ringtrace: event kind %r is past the collector's max_schema_bytes=%d; its events are not shown",
                    kind.name,
                    self.max_schema_bytes,
                )
                continue
            self.schema_bytes += size
            new.append(kind)
        frames = []
        for start in range(0, len(new), _KINDS_PER_SCHEMA):
            chunk = new[start : start + _KINDS_PER_SCHEMA]
            try:
                frames.append(encode(Schema(tuple(chunk)), self.max_frame_bytes))
            except FrameTooLarge:  # kinds with many long field names: one frame each, and any that cannot fit stay out
                for kind in chunk:
                    try:
                        frames.append(encode(Schema((kind,)), self.max_frame_bytes))
                    except FrameTooLarge:
                        log.warning(
                            "ringtrace: event kind %r does not fit a frame; its events are not shown", kind.name
                        )
            self.kinds.update((kind.id, kind) for kind in chunk)
        if not frames:  # every stream declares its columns
            frames.append(encode(Schema(()), self.max_frame_bytes))
        return frames

    def _strings_frames(self, runs: list[tuple[int, list[str]]], reset: bool = False) -> list[bytes]:
        """STRINGS frames for ``runs`` of ``(first_id, strings)``, split to stay small; the first one resets the
        stream's table if ``reset``."""
        if reset:
            return [encode(Strings(0, (), reset=True), self.max_frame_bytes), *self._strings_frames(runs)]
        frames = []
        for first_id, strings in runs:
            start = 0
            while start < len(strings):
                end, spent = start, 0
                while end < len(strings) and (end == start or spent + len(strings[end]) * 4 < _STRINGS_FRAME_BUDGET):
                    spent += len(strings[end]) * 4  # worst case of UTF-8
                    end += 1
                strings_frame = Strings(first_id + start, tuple(strings[start:end]))
                frames.append(encode(strings_frame, self.max_frame_bytes))
                start = end
        return frames

    def _encode_run(self, batch: EncodedBatch, track_id: int, records: list[Any]) -> None:
        table = self.strings
        counters = table.overflowed, self.clipped_args, self.rejected_events
        if _pack_columns is not None:
            try:
                packed = self._pack_accelerated(track_id, records)
                if packed is not None:
                    batch.events.append(packed)
                return
            except Exception:  # an unhashable label, a frame too large: the general way, counting all again
                table.overflowed, self.clipped_args, self.rejected_events = counters
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
        self._encode_columns(batch, track_id, _Columns(kinds, names, starts, ends, self._normalised(args)))

    def _pack_accelerated(self, track_id: int, records: list[Any]) -> tuple[bytes, int] | None:
        """One EVENTS frame for ``records`` packed in C (None when every event was left out), the arguments too where
        they have the common shapes, the rest through ``_packed_args``; raises where ``_pack`` would adapt.

        The arguments go first, as ``_with_typed_values`` does: an event left out never names a string."""
        assert _pack_columns is not None and _pack_args is not None and _pack_events is not None
        table = self.strings
        overflowed = table.overflowed
        converters = self.registry.converters
        frame = _pack_events(records, table, converters, normalise_values, track_id, self.max_frame_bytes)
        if frame is not None:  # the common shapes, the whole frame in one pass
            return frame, len(records) // RECORD_FIELDS
        table.overflowed = overflowed  # the labels looked up before it gave up are looked up again below
        packed_args, rejected = _pack_args(records, converters, normalise_values, self._packed_args)
        if rejected:
            records = _without(records, rejected)
            if not records:
                return None
        head, first_ns, last_ns, arg_maps = _pack_columns(records, table)
        assert (arg_maps is None) == (packed_args is None)
        payload = head if packed_args is None else head + packed_args
        count = len(records) // RECORD_FIELDS
        return encode(Events(track_id, count, first_ns, last_ns, payload), self.max_frame_bytes), count

    def _packed_args(self, kind: object, args: Any) -> bytes | None:
        """One event's arguments as the Python path packs them (``_with_typed_values``, ``_normalised``, ``_pack``),
        or None for an event left out: what C leaves to Python (nested or large values, other types, ...)."""
        args = as_map(args)
        if args is not None and type(args) is not dict:
            args = self._typed_values(kind, args)
            if args is None:
                return None
        args = self._normalised([args])[0]
        packed: bytes
        try:
            packed = self._packer.pack(args)
        except Exception:  # a flat value msgpack still refuses (a lone surrogate), as in _pack
            packed = self._packer.pack(self._normalise(args))
        return packed

    def _with_typed_values(self, records: list[Any]) -> list[Any]:
        """``records`` with each argument that is not a map (a typed event, a message's values) turned into its wire
        values by its kind's converter; an event whose values do not fit their types is left out, counted in
        ``rejected_events``, with one warning per kind."""
        args = records[4::RECORD_FIELDS]
        if args.count(None) == len(args):  # no arguments at all (counted in C): the usual case
            return records
        # Selected by type, not by truth: an Event subclass may define __bool__.
        tuples = [i for i, arg in enumerate(args) if arg is not None and type(arg) is not dict]
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
            if type(arg) is list:  # a typed event's values, checked against their types already
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

    def _encode_columns(self, batch: EncodedBatch, track_id: int, columns: _Columns) -> None:
        count = len(columns.kinds)
        try:
            frame = self._pack(track_id, columns)
        except FrameTooLarge:
            if count == 1:
                batch.dropped_events += 1
                return
            half = math.ceil(count / 2)
            for part in (slice(None, half), slice(half, None)):
                self._encode_columns(batch, track_id, _Columns(*(column[part] for column in columns)))
            return
        batch.events.append((frame, count))

    def _pack(self, track_id: int, columns: _Columns) -> bytes:
        kinds, names, starts, ends, args = columns
        first_ns = min(starts)
        # Instants end where they start (the same int objects: the comparison is by identity, in C).
        durations = [0] * len(starts) if ends == starts else list(map(sub, ends, starts))
        packed = [kinds, names, list(map(sub, starts, repeat(first_ns))), durations, args]
        try:
            payload = self._packer.pack(packed)
        except Exception:  # a flat value msgpack still refuses (a lone surrogate): normalise the maps it is in
            packed[4] = [a if a is None or self._packable(a) else self._normalise(a) for a in args]
            payload = self._packer.pack(packed)
        return encode(Events(track_id, len(kinds), first_ns, max(ends), payload), self.max_frame_bytes)

    def _packable(self, value: object) -> bool:
        try:
            self._packer.pack(value)
        except Exception:
            return False
        return True

    def _normalise(self, args: dict[str, Any]) -> dict[str, Any]:
        normalised, clipped = normalise_args(args)
        self.clipped_args += clipped
        return normalised


def _track_frame(track: TrackInfo) -> Track:
    return Track(track.track_id, track.kind, track.name, track.thread_id, track.parent)


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
