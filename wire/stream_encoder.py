"""The stream encoder, sans-I/O: one stream's string table, schema and track list, and drained events to frames.

Both sides use it: the client for its streams and trace files, the collector for what it translates from other
systems (OTLP, foreign recordings). Work is cut into runs of at most ``max_events_per_frame`` events so that no single
C call holds the interpreter long enough to stall a recording thread (a few hundred microseconds each); how a run is
packed, in C or in Python, is ``event_packing.py``'s.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from operator import add
from typing import Any, Final

import msgpack
from ringtrace.wire.call_packing import CALLS_ACCELERATED, CallIds, NotPackable
from ringtrace.wire.call_records import RECORD as CALL_RECORD
from ringtrace.wire.call_records import CallRun, event_count
from ringtrace.wire.errors import FrameTooLarge
from ringtrace.wire.event_packing import ACCELERATED, EncodedBatch, EventColumns, EventPacking
from ringtrace.wire.frame_types import (
    DEFAULT_MAX_FRAME_BYTES,
    EVENTS_HEADER,
    FRAME_HEADER,
    MIN_MAX_FRAME_BYTES,
    FrameType,
)
from ringtrace.wire.frames import Stats, encode
from ringtrace.wire.model import KINDS, RECORD_FIELDS, KindRegistry, TrackInfo
from ringtrace.wire.record_packing import RECORDS_ACCELERATED, RecordIds
from ringtrace.wire.record_runs import RecordRun
from ringtrace.wire.stack_table import STACK_KINDS, StackTable
from ringtrace.wire.string_table import StringTable
from ringtrace.wire.table_frames import KindSpec, Schema, Strings, track_body

__all__ = ["EncodedBatch", "StreamEncoder"]

#: Bytes one STRINGS frame may spend on strings: half the smallest max_frame_bytes a collector accepts.
_STRINGS_FRAME_BUDGET: Final = MIN_MAX_FRAME_BYTES // 2
#: Kinds per SCHEMA frame.
_KINDS_PER_SCHEMA: Final = 32

log = logging.getLogger("ringtrace.client")


class StreamEncoder(EventPacking):
    """Turns drained events (flat: ``kind, label, start_ns, end_ns, args`` per event) into the frames of one stream.

    Args:
        max_frame_bytes: frames are split so that none exceeds this.
        max_events_per_frame: a frame holds at most this many events (also the unit of work between pauses).
        max_strings: size of the string table, the overflow label's id included.
        registry: the kinds the stream declares, and what turns typed values into wire values: the process's
            ``KINDS``, or a registry of its own for a stream that carries another system's kinds (a recording
            translated from a foreign format).
        accelerated: pack runs with the C packer (the default where it is in use; False: the pure-Python way, which
            writes the same bytes).
    """

    def __init__(
        self,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_events_per_frame: int = 8192,
        max_strings: int = 100_000,
        registry: KindRegistry = KINDS,
        accelerated: bool = ACCELERATED,
    ) -> None:
        self.registry = registry
        self.strings = StringTable(max_strings)
        #: The call stacks of the stream's samples (STACKS).
        self.stacks = StackTable()
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
        self._choose_packing(accelerated)
        #: Runs of traced calls are packed in C from their records (else as their flat records, the Python way).
        self._call_ids = CallIds() if accelerated and CALLS_ACCELERATED else None
        #: Runs of compact records are packed in C from their records (else as their flat records).
        self._record_ids = RecordIds() if accelerated and RECORDS_ACCELERATED else None

    @property
    def label_overflow_events(self) -> int:
        return self.strings.overflowed

    def stats(
        self, dropped_events: int, dropped_frames: int, unacknowledged_events: int, internal_error_events: int = 0
    ) -> Stats:
        """The stream's loss counters: the listener's (given) and the encoder's own (a sample whose stack did not fit
        the stack table counts as clipped: it is kept, its stack shown as unknown)."""
        return Stats(
            dropped_events,
            dropped_frames,
            self.label_overflow_events,
            self.clipped_args + self.stacks.overflowed,
            self.rejected_events,
            unacknowledged_events,
            internal_error_events,
        )

    def prefix(self) -> list[bytes]:
        """The frames a new stream needs before any EVENTS: SCHEMA, the whole string and stack tables, every live
        track."""
        self.kinds = {}
        self.schema_bytes = 0
        self._withheld = set()
        frames = self._schema_frames()
        frames += self._strings_frames(self.strings.runs())
        self.strings.take_new()  # all of it is in the prefix
        self.strings.take_reset()  # a new stream's table starts empty
        frames += [encode(stacks, self.max_frame_bytes) for stacks in self.stacks.frames()]
        frames += [_track_frame(track, False, self.max_frame_bytes) for track in self.tracks.values()]
        return frames

    def declare(self, track: TrackInfo) -> bytes | None:
        """A TRACK frame if ``track`` is new to this stream or renamed, else None."""
        if self.tracks.get(track.track_id) == track:
            return None
        self.tracks[track.track_id] = track
        return _track_frame(track, False, self.max_frame_bytes)

    def retire(self, track: TrackInfo) -> bytes | None:
        """A TRACK frame ending ``track`` if this stream declared it (its id no longer counts), else None."""
        if self.tracks.pop(track.track_id, None) is None:
            return None
        return _track_frame(track, True, self.max_frame_bytes)

    def encode(self, track: TrackInfo, records: list[Any] | CallRun | RecordRun) -> EncodedBatch:
        """Frames for one track's drained events, ``RECORD_FIELDS`` values each, or a run of traced calls (the same
        frames as its ``as_flat()`` records): if the string table filled while packing them and ``recycles``, it
        starts again and they are packed in the new epoch."""
        declared = self.declare(track)
        known = len(self.kinds) + len(self._withheld)
        schema = self._schema_frames() if known < len(self.registry) and len(self.kinds) < self.max_kinds else []
        table, stacks = self.strings, self.stacks
        counters = (table.overflowed, self.clipped_args, self.rejected_events, stacks.overflowed)
        had_strings = bool(table.strings)
        given = records
        batch = self._encode_given(track.track_id, given)
        stacks_full = stacks.full and table.recycles
        if (table.recycles and table.overflowed > counters[0] and had_strings) or stacks_full:
            # A table filled: start it again and pack the run in the new one (what overflows even so is counted). A
            # full stack table starts again with the strings: frames packed before are of an earlier epoch.
            table.overflowed, self.clipped_args, self.rejected_events, stacks.overflowed = counters
            epoch = table.epoch
            table.recycle()
            if stacks_full:
                stacks.recycle(epoch)
            batch = self._encode_given(track.track_id, given)
        batch.control = schema + self._strings_frames(table.take_new(), reset=table.take_reset())
        batch.control += [encode(stacks, self.max_frame_bytes) for stacks in self.stacks.take_new()]
        if declared is not None:
            batch.control.insert(0, declared)
        return batch

    def _encode_given(self, track_id: int, given: list[Any] | CallRun | RecordRun) -> EncodedBatch:
        """The EVENTS frames of a run as given (the tables' control frames are the caller's to take)."""
        if isinstance(given, CallRun):
            if self._call_ids is not None:
                table, stacks = self.strings, self.stacks
                counters = (table.overflowed, stacks.overflowed)
                batch = EncodedBatch(table.epoch)
                try:
                    limits = (self.max_events_per_frame, self.max_frame_bytes)
                    self._call_ids.pack(batch, track_id, given, (table, stacks), limits, self._encode_columns)
                    return batch
                except NotPackable:  # a location named by no text: the Python way, counting all again
                    table.overflowed, stacks.overflowed = counters
            given = given.as_flat()
        elif isinstance(given, RecordRun):
            if self._record_ids is not None:
                batch = EncodedBatch(self.strings.epoch)
                limits = (self.max_events_per_frame, self.max_frame_bytes)
                self._record_ids.pack(batch, track_id, given, self.strings, limits, self._encode_columns)
                return batch
            given = given.as_flat()
        records = self.stacks.with_ids(given)  # (samples, calls: before packing, so that their STACKS frames are known)
        return self._encode_events(track_id, records)

    def encode_pieces(
        self, track: TrackInfo, records: list[Any] | CallRun | RecordRun
    ) -> Iterator[tuple[EncodedBatch, int]]:
        """``encode``, in as many batches as the string table needs, each with the number of events it was given:
        where the table ``recycles`` and the run has more events than the table has room for labels, in pieces of
        half a table's labels, so that the table starting again between two pieces is enough for each (a run of only
        new labels, say, from a thread that recorded faster than the flusher drained)."""
        table = self.strings
        if not table.recycles or event_count(records) <= table.overflow_id - len(table.strings):
            yield self.encode(track, records), event_count(records)
            return
        if isinstance(records, CallRun):
            step = max(table.overflow_id // 2, 1) * CALL_RECORD.size
            for start in range(0, len(records.records), step):
                run = CallRun(records.records[start : start + step], records.locations)
                yield self.encode(track, run), len(run)
            return
        if isinstance(records, RecordRun):
            records = records.as_flat()  # (rare: a run with more new labels than the table has room for)
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
        if epoch is not None and epoch != table.epoch and any(kind in STACK_KINDS for kind in kinds):
            args = self._stack_ids_now(epoch, kinds, args)
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
        columns = EventColumns(kinds, names, starts, list(map(add, starts, durations)), args)
        self._encode_columns(batch, track_id, columns)
        batch.control = self._strings_frames(table.take_new(), reset=table.take_reset())
        batch.control += [encode(stacks, self.max_frame_bytes) for stacks in self.stacks.take_new()]
        return batch

    def _stack_ids_now(self, epoch: int, kinds: list[Any], args: list[Any]) -> list[Any]:
        """The stack ids of a frame packed in string ``epoch`` (samples', traced calls'), as ids of the stack table
        now (the same where it did not start again since)."""
        stacks = self.stacks
        if not stacks.restarted_since(epoch):
            return args
        args = list(args)
        for index, kind in enumerate(kinds):
            if kind in STACK_KINDS:
                stack = stacks.stack_in(epoch, args[index])
                args[index] = stacks.id_of(stack) if stack is not None else None
        return args

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


def _track_frame(track: TrackInfo, ended: bool, max_frame_bytes: int) -> bytes:
    """``encode(Track(...))`` of ``track``, without the frame object (an OTLP trace's lane takes two: its own, ended).

    Raises:
        FrameTooLarge: the frame would exceed ``max_frame_bytes``.
    """
    body = track_body(track.track_id, track.kind, track.name, track.thread_id, track.parent, ended)
    size = FRAME_HEADER.size + len(body)
    if size > max_frame_bytes:
        raise FrameTooLarge(size, max_frame_bytes)
    return FRAME_HEADER.pack(len(body), FrameType.TRACK) + body
